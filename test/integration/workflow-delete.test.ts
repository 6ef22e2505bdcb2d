import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { expectProblem } from '../support/problems.js';
import {
  cancelWorkflow,
  createSession,
  postWorkflow,
  startWorkflow,
  storedEvents,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/** `DELETE /v1/workflows/:id`: an ended workflow goes with its events, turns and plans. */

const { app, newTenant } = useScriptedApp();

function remove(key: string, id: string) {
  return app().app.inject({ method: 'DELETE', url: `/v1/workflows/${id}`, headers: bearer(key) });
}

function get(key: string, id: string) {
  return app().app.inject({ method: 'GET', url: `/v1/workflows/${id}`, headers: bearer(key) });
}

/** Rows of `table` that name the workflow. */
async function rowsOf(table: string, id: string): Promise<number> {
  const { rows } = await app().services.database.pool.query<{ count: string }>(
    `SELECT count(*) AS count FROM ${table} WHERE workflow_id = $1`,
    [id],
  );
  return Number(rows[0]?.count);
}

async function completed(tenant: TestTenant, payload: Record<string, unknown> = {}) {
  const id = await startWorkflow(app(), tenant.key, { input: 'What is 6 * 7?', ...payload });
  expect((await waitForStatus(app(), tenant.key, id, ['completed', 'failed'])).status).toBe(
    'completed',
  );
  return id;
}

describe('deleting a workflow', () => {
  it('an ended one goes with its events and turns; its usage ledger rows stay; then it is 404', async () => {
    const tenant = await newTenant('delete-ended');
    const id = await completed(tenant);
    expect((await storedEvents(app(), id)).length).toBeGreaterThan(0);
    expect(await rowsOf('workflow_turns', id)).toBeGreaterThan(0);
    // The ledger writes a run's last rows in batches, about every 250 ms.
    await expect.poll(() => rowsOf('llm_calls', id), { timeout: 5_000 }).toBe(2);

    const response = await remove(tenant.key, id);
    expect(response.statusCode, response.body).toBe(204);
    expect(response.body).toBe('');
    expectProblem(await get(tenant.key, id), 404, 'not_found');
    expect(await storedEvents(app(), id)).toEqual([]);
    expect(await rowsOf('workflow_turns', id)).toBe(0);
    expect(await rowsOf('llm_calls', id)).toBe(2);
    expectProblem(await remove(tenant.key, id), 404, 'not_found');
  });

  it('a paused one is 409 workflow_not_finished, with its state, and stays; cancelled, it can be deleted', async () => {
    const tenant = await newTenant('delete-paused');
    // The scripted model asks about a vague request.
    const id = await startWorkflow(app(), tenant.key, { input: 'help' });
    const paused = await waitForStatus(app(), tenant.key, id, ['awaiting_input', 'failed']);
    expect(paused.status).toBe('awaiting_input');
    const refused = expectProblem(await remove(tenant.key, id), 409, 'workflow_not_finished');
    expect(refused.current).toEqual({
      status: 'awaiting_input',
      awaitingReason: 'clarification',
      version: paused.version,
    });
    expect((await get(tenant.key, id)).statusCode).toBe(200);
    expect((await cancelWorkflow(app(), tenant.key, id)).statusCode).toBe(202);
    await waitForStatus(app(), tenant.key, id, ['cancelled']);
    expect((await remove(tenant.key, id)).statusCode).toBe(204);
  });

  it('another tenant’s answers 404 and stays; a malformed id 400', async () => {
    const owner = await newTenant('delete-owner');
    const other = await newTenant('delete-other');
    const id = await completed(owner);
    expectProblem(await remove(other.key, id), 404, 'not_found');
    expectProblem(await remove(owner.key, randomUUID()), 404, 'not_found');
    expect((await get(owner.key, id)).statusCode).toBe(200);
    expectProblem(await remove(owner.key, 'not-a-uuid'), 400, 'validation_failed');
  });

  it('in a session, its question and answer stay among the session’s messages', async () => {
    const tenant = await newTenant('delete-in-session');
    const sessionId = await createSession(app(), tenant.key);
    const id = await completed(tenant, { sessionId });
    expect((await remove(tenant.key, id)).statusCode).toBe(204);
    const session = await app().app.inject({
      method: 'GET',
      url: `/v1/sessions/${sessionId}`,
      headers: bearer(tenant.key),
    });
    expect(
      session
        .json()
        .messages.map((message: { role: string; workflowId: string }) => [
          message.role,
          message.workflowId,
        ]),
    ).toEqual([
      ['user', id],
      ['assistant', id],
    ]);
  });

  it('its Idempotency-Key may be used again: the same request then creates a new workflow', async () => {
    const tenant = await newTenant('delete-idempotent');
    const key = `k-${randomUUID()}`;
    const first = await postWorkflow(
      app(),
      tenant.key,
      { input: 'What is 6 * 7?' },
      {
        'idempotency-key': key,
      },
    );
    expect(first.statusCode, first.body).toBe(202);
    const id = first.json().id as string;
    await waitForStatus(app(), tenant.key, id, ['completed', 'failed']);
    const replayed = await postWorkflow(
      app(),
      tenant.key,
      { input: 'What is 6 * 7?' },
      {
        'idempotency-key': key,
      },
    );
    expect(replayed.json().id).toBe(id);
    expect((await remove(tenant.key, id)).statusCode).toBe(204);
    const again = await postWorkflow(
      app(),
      tenant.key,
      { input: 'What is 6 * 7?' },
      {
        'idempotency-key': key,
      },
    );
    expect(again.statusCode, again.body).toBe(202);
    expect(again.json().id).not.toBe(id);
  });
});
