import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { lockWaiter } from '../../support/database.js';
import { answer, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { waitForStatus } from '../../support/workflows.js';

/**
 * A run whose database connection is lost, or whose write PostgreSQL gives
 * up on for the moment, fails its step, not its workflow. The first turn's
 * write is held back by a row lock taken while the turn's tool runs
 * (startWithHeldTurnWrite), and its backend is terminated, or its
 * statement cancelled (as lock_timeout or statement_timeout would end it
 * during a migration), while it waits.
 */

describe.each([
  ['whose database connection is lost', 'pg_terminate_backend'],
  ['whose statement PostgreSQL gives up on', 'pg_cancel_backend'],
])('a run %s', (_case, stop) => {
  // Each case its own app and fake: a reply the first case's run left unasked would answer the next.
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

  it('is handed over and resumed from its last persisted turn, not failed', async () => {
    // The first reply calls the tool. The run that loses its write may ask
    // once more before it stops (the next turn's request goes out while the
    // turn's write is in flight); the resumed run asks again.
    const { id, lock } = await h.startWithHeldTurnWrite(
      `/slow/${stop}`,
      answer('Done.'),
      answer('Done.'),
    );
    try {
      const { rows: stopped } = await admin.query<{ done: boolean }>(`SELECT ${stop}($1) AS done`, [
        // The turn's write, not a lease renewal queued on the same row.
        await lockWaiter(admin, 'workflow_turns'),
      ]);
      expect(stopped[0]?.done).toBe(true);
      // What the run does next (fail the workflow, or hand it over) waits for the lock too.
      await new Promise((resolve) => setTimeout(resolve, 200));
      await lock.query('ROLLBACK');
      // The next sweep that finds its lease over takes the workflow: this
      // one, or the app's own periodic one (then it may have ended already).
      await vi.waitFor(
        async () => {
          const taken = await h.testApp.services.reclaimer.sweepOnce();
          const { rows } = await admin.query<{ status: string }>(
            'SELECT status FROM workflows WHERE id = $1',
            [id],
          );
          const ended = rows[0]?.status === 'failed' || rows[0]?.status === 'completed';
          expect(ended || taken.some((one) => one.id === id)).toBe(true);
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
