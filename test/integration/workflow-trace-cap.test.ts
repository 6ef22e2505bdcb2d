import type { Insertable } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowEventsTable } from '../../src/store/schema.js';
import { TRACE_MAX_EVENTS } from '../../src/workflows/trace.js';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import { insertWorkflow } from '../support/event-streams.js';

/**
 * A trace reads at most TRACE_MAX_EVENTS events: a longer log answers the
 * spans of its first ones, those still open there as open, with
 * `truncated` and the `lastSeq` to follow the events from; a log of
 * exactly that many is whole.
 */

let testApp: TestApp;
let key: string;
let tenantId: string;

beforeAll(async () => {
  testApp = await startTestApp();
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  key = created.adminKey.secret;
  tenantId = created.tenant.id;
});
afterAll(async () => testApp?.close());

/**
 * A finished workflow whose log is `workflow_start`, `turns` model calls
 * (each a started and a completed event) and `workflow_end`, written
 * straight to the database.
 */
async function workflowWithTurns(turns: number): Promise<{ id: string; events: number }> {
  const id = await insertWorkflow(testApp, tenantId, 'completed');
  const rows: Insertable<WorkflowEventsTable>[] = [];
  const add = (type: string, step: string | null, status: string, detail: object) =>
    rows.push({
      workflow_id: id,
      seq: rows.length + 1,
      tenant_id: tenantId,
      type,
      step,
      status,
      detail: JSON.stringify(detail),
      elapsed_ms: status === 'completed' && type === 'llm_call' ? 5 : null,
    });
  add('workflow_start', null, 'started', { mode: 'simple' });
  for (let turn = 1; turn <= turns; turn++) {
    add('llm_call', `turn-${turn}`, 'started', { model: 'gpt', turn });
    add('llm_call', `turn-${turn}`, 'completed', { model: 'gpt', finishReason: 'tool_calls' });
  }
  add('workflow_end', null, 'completed', { reason: 'answered' });
  for (let from = 0; from < rows.length; from += 5000) {
    await testApp.services.database.db
      .insertInto('workflow_events')
      .values(rows.slice(from, from + 5000))
      .execute();
  }
  return { id, events: rows.length };
}

async function traceOf(id: string) {
  const response = await testApp.app.inject({
    method: 'GET',
    url: `/v1/workflows/${id}/trace`,
    headers: bearer(key),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<{
    lastSeq: number;
    truncated: boolean;
    spans: { id: number; kind: string; status: string; endSeq: number | null }[];
  }>();
}

describe('GET /v1/workflows/:id/trace on a long log', () => {
  it('past TRACE_MAX_EVENTS: the spans of the first ones, the one cut midway open, truncated', async () => {
    // The cap falls between a model call's start and its end.
    const { id, events } = await workflowWithTurns(TRACE_MAX_EVENTS / 2 + 100);
    expect(events).toBeGreaterThan(TRACE_MAX_EVENTS + 1);
    const trace = await traceOf(id);
    expect(trace.truncated).toBe(true);
    expect(trace.lastSeq).toBe(TRACE_MAX_EVENTS);
    expect(trace.spans).toHaveLength(1 + TRACE_MAX_EVENTS / 2);
    expect(trace.spans.every((span) => (span.endSeq ?? 0) <= TRACE_MAX_EVENTS)).toBe(true);
    expect(trace.spans[0]).toMatchObject({ kind: 'workflow', status: 'open' });
    expect(trace.spans.at(-1)).toMatchObject({ id: TRACE_MAX_EVENTS, status: 'open' });
    expect(trace.spans.filter((span) => span.status === 'open')).toHaveLength(2);
  });

  it('exactly TRACE_MAX_EVENTS: the whole log, every span ended, not truncated', async () => {
    const { id, events } = await workflowWithTurns((TRACE_MAX_EVENTS - 2) / 2);
    expect(events).toBe(TRACE_MAX_EVENTS);
    const trace = await traceOf(id);
    expect(trace.truncated).toBe(false);
    expect(trace.lastSeq).toBe(TRACE_MAX_EVENTS);
    expect(trace.spans[0]).toMatchObject({ kind: 'workflow', status: 'completed' });
    expect(trace.spans.filter((span) => span.status === 'open')).toEqual([]);
  });
});
