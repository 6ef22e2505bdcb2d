import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetentionSweeper } from '../../src/workflows/retention.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { lockWaiter } from '../support/database.js';
import { closeTestApp, listen, openStream, operatorTenant } from '../support/event-streams.js';

/**
 * An event stream of a finished workflow that the retention sweep deletes
 * while the stream replays it. Nothing will ever be emitted for it again,
 * so a stream that waited for more after finding its events gone stayed
 * open for good, a heartbeat every SSE_HEARTBEAT_MS, and its client never
 * learnt the workflow was gone.
 */

const DAY_MS = 86_400_000;
let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ SSE_RETRY_MS: '10', SSE_HEARTBEAT_MS: '1000' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

/** A workflow that completed 40 days ago with `events` stored events, the last its `workflow_end`. */
async function oldCompletedWorkflow(events: number): Promise<string> {
  const id = randomUUID();
  const finishedAt = new Date(Date.now() - 40 * DAY_MS);
  const { db } = testApp.services.database;
  await sql`
    INSERT INTO workflows (id, tenant_id, status, mode, model, input, last_seq, created_at, finished_at)
    VALUES (${id}, ${tenantId}, 'completed', 'simple', 'scripted', 'an old question', ${events},
            ${finishedAt}, ${finishedAt})`.execute(db);
  await sql`
    INSERT INTO workflow_events (workflow_id, seq, tenant_id, type, status)
    SELECT ${id}, seq, ${tenantId}, CASE WHEN seq = ${events} THEN 'workflow_end' ELSE 'warning' END,
           CASE WHEN seq = ${events} THEN 'completed' ELSE 'info' END
    FROM generate_series(1, ${events}) AS seq`.execute(db);
  return id;
}

describe('an event stream whose workflow the retention sweep deletes', () => {
  it('deleted after the stream read the workflow, before its replay: the stream ends, and the reconnect gets 404', async () => {
    const id = await oldCompletedWorkflow(3);
    const { db, pool } = testApp.services.database;
    const client = openStream(`${baseUrl}/v1/workflows/${id}/events`, { key });
    try {
      // The sweep's transaction holds the events table while the stream's
      // replay waits for it: the stream has read the workflow row (there,
      // completed, 3 events) and finds the events gone once the sweep commits.
      await db.transaction().execute(async (trx) => {
        await sql`LOCK TABLE workflow_events IN ACCESS EXCLUSIVE MODE`.execute(trx);
        await lockWaiter(pool, 'workflow_events');
        const sweep = createRetentionSweeper({
          db: trx,
          log: pino({ level: 'silent' }),
          retentionDays: 30,
          intervalMs: 3_600_000,
        });
        expect((await sweep.sweepOnce()).workflows).toBe(1);
      });

      const outcome = await Promise.race([
        client.ended.then(
          () => 'ended after workflow_end',
          (error: Error) => error.message,
        ),
        new Promise<string>((resolve) => setTimeout(() => resolve('still open after 5 s'), 5_000)),
      ]);
      // The EventSource reconnected after the stream ended, got 404 and gave up.
      expect(outcome).toMatch(/the event stream failed/);
      expect(client.events).toEqual([]);
      expect(client.connections()).toBe(2);
    } finally {
      client.close();
    }
  });
});
