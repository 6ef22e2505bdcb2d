import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestAppOn, type TestApp } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  bootstrapOperator,
  createTenant,
  scriptedCatalogue,
  startWorkflow,
  type TestTenant,
  waitForStatus,
} from '../support/workflows.js';

/** The line a run logs when it ends or pauses its workflow, for operators. */

let database: TestDatabase;
let testApp: TestApp;
let tenant: TestTenant;
const lines: Record<string, unknown>[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  testApp = await startTestAppOn(
    database,
    { WAYMARK_MODELS: scriptedCatalogue() },
    pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
  );
  tenant = await createTenant(testApp, await bootstrapOperator(testApp), { name: 'logged' });
});
afterAll(async () => {
  await testApp?.close();
  await database?.drop();
});

function runLines(workflowId: string) {
  return lines.filter(
    (line) => line.workflowId === workflowId && String(line.msg).startsWith('workflow run '),
  );
}

describe('the run’s log line', () => {
  it('a completed workflow: its status, reason, tenant, model, time and usage, at info', async () => {
    const id = await startWorkflow(testApp, tenant.key, { input: 'What is 6 * 7?' });
    await waitForStatus(testApp, tenant.key, id, ['completed']);
    // Logged once the end has committed, which the status may show first.
    await expect.poll(() => runLines(id).length).toBe(1);
    expect(runLines(id)).toEqual([
      expect.objectContaining({
        level: 30,
        msg: 'workflow run ended',
        status: 'completed',
        reason: 'answered',
        tenantId: tenant.id,
        model: 'scripted',
        elapsedMs: expect.any(Number),
        inputTokens: expect.any(Number),
        outputTokens: expect.any(Number),
        costUsd: 0,
      }),
    ]);
    expect(runLines(id)[0]?.inputTokens).toBeGreaterThan(0);
  });

  it('a workflow paused for a clarification: its reason', async () => {
    const id = await startWorkflow(testApp, tenant.key, { input: 'help me' });
    await waitForStatus(testApp, tenant.key, id, ['awaiting_input']);
    await expect.poll(() => runLines(id).length).toBe(1);
    expect(runLines(id)).toEqual([
      expect.objectContaining({
        msg: 'workflow run paused',
        status: 'awaiting_input',
        reason: 'clarification',
      }),
    ]);
  });

  it('answers sent at once: the one accepted resumes it, the others get 409, and none logs a warning', async () => {
    const id = await startWorkflow(testApp, tenant.key, { input: 'help me' });
    await waitForStatus(testApp, tenant.key, id, ['awaiting_input']);
    const from = lines.length;

    const responses = await Promise.all(
      Array.from({ length: 20 }, () =>
        testApp.app.inject({
          method: 'POST',
          url: `/v1/workflows/${id}/answer`,
          headers: bearer(tenant.key),
          payload: { answer: 'the totals for March' },
        }),
      ),
    );
    const codes = responses.map((response) => response.statusCode);
    expect(codes.filter((code) => code === 202)).toHaveLength(1);
    expect(codes.filter((code) => code === 409)).toHaveLength(19);
    await waitForStatus(testApp, tenant.key, id, ['completed', 'awaiting_input']);

    // A refusal the client is answered with is no operator's concern.
    const warnings = lines.slice(from).filter((line) => Number(line.level) >= 40);
    expect(warnings).toEqual([]);
  });
});
