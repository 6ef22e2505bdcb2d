import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { lockWaiter } from '../../support/database.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { waitForStatus } from '../../support/workflows.js';

/**
 * A run whose write PostgreSQL gives up on for the moment (here its
 * statement is cancelled while it waits for a row lock, as lock_timeout or
 * statement_timeout would end it during a migration) fails its step, not
 * its workflow.
 */

const h = useToolLoopHarness({
  env: { WORKFLOW_LEASE_MS: '1000', WORKFLOW_LEASE_RENEW_MS: '500' },
});
let admin: pg.Client;
beforeAll(async () => {
  admin = new pg.Client({ connectionString: h.testApp.database.url });
  await admin.connect();
});
afterAll(async () => {
  await admin?.end();
});

describe('a run whose statement PostgreSQL gives up on', () => {
  it('is handed over and resumed from its last persisted turn, not failed', async () => {
    const { id, lock } = await h.startWithHeldTurnWrite(
      '/slow/given-up',
      answer('Done.'),
      answer('Done.'),
    );
    try {
      const { rows: cancelled } = await admin.query<{ ok: boolean }>(
        'SELECT pg_cancel_backend($1) AS ok',
        [await lockWaiter(admin)],
      );
      expect(cancelled[0]?.ok).toBe(true);
      // What the run does next (fail the workflow, or hand it over) waits for the lock too.
      await new Promise((resolve) => setTimeout(resolve, 200));
      await lock.query('ROLLBACK');
      await vi.waitFor(
        async () => {
          const taken = await h.testApp.services.reclaimer.sweepOnce();
          const { rows } = await admin.query<{ status: string }>(
            'SELECT status FROM workflows WHERE id = $1',
            [id],
          );
          expect(rows[0]?.status === 'failed' || taken.some((one) => one.id === id)).toBe(true);
        },
        { timeout: 20_000, interval: 100 },
      );
      const workflow = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
      expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'Done.' } });
    } finally {
      lock.release();
    }
  });
});
