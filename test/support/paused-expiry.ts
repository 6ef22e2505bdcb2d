import type { PoolClient } from 'pg';
import pino from 'pino';
import { expect } from 'vitest';
import {
  createRetentionSweeper,
  type RetentionSweeperOptions,
} from '../../src/workflows/retention.js';
import { bearer } from './app.js';
import { type answer, callsTo, type ToolLoopHarness } from './tool-loop-harness.js';
import { startWorkflow, waitForStatus } from './workflows.js';

/**
 * Helpers for the tests of PAUSED_WORKFLOW_EXPIRY_DAYS, on a tool-loop
 * harness started with it at 7 days: workflows paused on a question, their
 * pauses aged by moving `paused_at` back (as the retention tests move
 * `finished_at`), sweepers of their own and a hold on a workflow's next
 * event for the races.
 */

/** The last event of a workflow the sweep ended. */
export const expiredEnd = {
  type: 'workflow_end',
  status: 'cancelled',
  detail: {
    reason: 'input expired',
    error: { code: 'input_expired', message: expect.stringContaining('7 days') },
  },
};

/** Helpers on the harness `harness()` returns (one a test file starts in its beforeAll). */
export function pausedExpiry(harness: () => ToolLoopHarness) {
  /** Questions asked so far, which number their tool calls. */
  let questions = 0;

  function pool() {
    return harness().testApp.services.database.pool;
  }

  return {
    pool,

    /** Cancels every workflow still paused, so that none is left for the next test's sweep to count. */
    async cancelPaused(): Promise<void> {
      const h = harness();
      const { rows } = await pool().query<{ id: string }>(
        `SELECT id FROM workflows WHERE status = 'awaiting_input'`,
      );
      for (const { id } of rows) await h.testApp.services.workflows.cancel(h.tenant.id, id);
    },

    /** A sweeper of its own over the test database: expiry after 7 days, no retention, unless `options` says otherwise. */
    sweeperWith(options: Partial<RetentionSweeperOptions> = {}) {
      const h = harness();
      return createRetentionSweeper({
        db: h.testApp.services.database.db,
        log: pino({ level: 'silent' }),
        retentionDays: 0,
        intervalMs: 1000,
        pausedExpiry: { days: 7, expire: h.testApp.services.workflows.expirePaused },
        ...options,
      });
    },

    /** `POST <base><path>` with the tenant's key, over a real socket. */
    post(base: string, path: string, body: Record<string, unknown> = {}): Promise<Response> {
      return fetch(`${base}${path}`, {
        method: 'POST',
        headers: { ...bearer(harness().tenant.key), 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    },

    /** A workflow paused on an `ask_user` question; `replies` are what the model says after the answer. */
    async pausedOnQuestion(
      extra: Record<string, unknown> = {},
      ...replies: ReturnType<typeof answer>[]
    ): Promise<string> {
      const h = harness();
      questions += 1;
      h.provider.enqueue(
        callsTo({
          id: `call_q${questions}`,
          name: 'ask_user',
          arguments: { question: 'Which city?', question_type: 'free_text' },
        }),
        ...replies,
      );
      const id = await startWorkflow(h.testApp, h.tenant.key, {
        input: 'What is the weather like?',
        mode: 'simple',
        ...extra,
      });
      const paused = await waitForStatus(h.testApp, h.tenant.key, id, [
        'awaiting_input',
        'failed',
        'completed',
      ]);
      expect(paused).toMatchObject({ status: 'awaiting_input', awaitingReason: 'clarification' });
      return id;
    },

    async pausedDaysAgo(id: string, days: number): Promise<void> {
      await pool().query(
        `UPDATE workflows SET paused_at = now() - $2::integer * interval '1 day' WHERE id = $1`,
        [id, days],
      );
    },

    async pausedAt(id: string): Promise<Date | null> {
      const { rows } = await pool().query<{ paused_at: Date | null }>(
        'SELECT paused_at FROM workflows WHERE id = $1',
        [id],
      );
      return rows[0]?.paused_at ?? null;
    },

    /** `waymark_workflows_finished_total{status="cancelled"}` on the sweeping replica. */
    async cancelledCount(): Promise<number> {
      const h = harness();
      const response = await h.testApp.app.inject({
        method: 'GET',
        url: '/metrics',
        headers: bearer(h.operatorKey),
      });
      expect(response.statusCode).toBe(200);
      const match = /^waymark_workflows_finished_total\{status="cancelled"\} (\d+)$/m.exec(
        response.body,
      );
      return Number(match?.[1] ?? 0);
    },

    /**
     * Holds, in an open transaction, the seq of the workflow's next event: the
     * next statement that appends to it waits for this transaction (the
     * primary key's uniqueness), still holding the row locks it took before.
     */
    async holdNextSeq(id: string): Promise<PoolClient> {
      const holder = await pool().connect();
      await holder.query('BEGIN');
      await holder.query(
        `INSERT INTO workflow_events (workflow_id, seq, tenant_id, type, status)
         SELECT id, last_seq + 1, tenant_id, 'warning', 'info' FROM workflows WHERE id = $1`,
        [id],
      );
      return holder;
    },

    async release(holder: PoolClient): Promise<void> {
      await holder.query('ROLLBACK');
      holder.release();
    },
  };
}
