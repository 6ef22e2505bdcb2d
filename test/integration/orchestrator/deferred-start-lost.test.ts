import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FakeReply } from '../../fakes/provider-types.js';
import { answer, callsTo, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitFor } from '../../support/workflows.js';

/**
 * A run's start (queued -> running, with `workflow_start`) is written
 * deferred, without the run waiting for it. When that statement fails
 * (here its backend is terminated, by a trigger on the start's UPDATE,
 * once), the run writes nothing more: no turn and no event on a workflow
 * that never started. It stops at its next write that waits and hands the
 * workflow over, to be run afresh. The first model turn is slower than the
 * progress flush (20 ms), so the start goes out alone.
 */

const h = useToolLoopHarness({
  env: { WORKFLOW_LEASE_MS: '1000', WORKFLOW_LEASE_RENEW_MS: '500' },
});
let admin: pg.Client;
beforeAll(async () => {
  admin = new pg.Client({ connectionString: h.testApp.database.url });
  await admin.connect();
  await admin.query(`
    CREATE SEQUENCE zz_start_attempts;
    CREATE FUNCTION zz_fail_start() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF OLD.status = 'queued' AND NEW.status = 'running' AND NEW.input LIKE 'zz-start%' THEN
        -- A sequence is not rolled back with the statement: the first start only.
        IF nextval('zz_start_attempts') = 1 THEN
          PERFORM pg_terminate_backend(pg_backend_pid());
        END IF;
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER zz_fail_start BEFORE UPDATE ON workflows
      FOR EACH ROW EXECUTE FUNCTION zz_fail_start();`);
});
afterAll(async () => {
  await admin?.end();
});

describe('a run whose deferred start fails', () => {
  it('does not go on writing turns and events on a workflow that never started', async () => {
    const tool = await h.registerTool('/slow/start');
    // A first turn slower than the progress flush: the start is written before its reply.
    h.provider.enqueue(
      { ...(callsTo({ name: tool, arguments: {} }) as FakeReply), firstByteDelayMs: 300 },
      answer('Done.'),
      answer('Done.'),
      answer('Done.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, { input: 'zz-start: use the tool' });
    // The start statement failed (the trigger recorded it).
    await waitFor(async () => {
      const { rows } = await admin.query<{ is_called: boolean }>(
        'SELECT is_called FROM zz_start_attempts',
      );
      return rows[0]?.is_called ? true : undefined;
    }, 'the start to fail');
    // The run goes on (model reply 300 ms, tool 150 ms, a second turn) and stops.
    await waitFor(
      () => (h.testApp.services.executions.isRunning(id) ? undefined : true),
      'the run to stop',
    );
    const { rows } = await admin.query<{ status: string; lease_owner: string | null }>(
      'SELECT status, lease_owner FROM workflows WHERE id = $1',
      [id],
    );
    const events = await storedEvents(h.testApp, id);
    const turns = await admin.query('SELECT turn FROM workflow_turns WHERE workflow_id = $1', [id]);
    expect(rows[0]?.status).toBe('queued');
    // Whatever the run wrote must follow a workflow_start...
    if (events.length > 0) expect(events[0]?.type).toBe('workflow_start');
    // ...and a workflow that never started has no persisted turn.
    expect(turns.rows).toEqual([]);
  });
});
