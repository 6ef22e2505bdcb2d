import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sessionHelpers } from '../support/sessions.js';
import { createSession, useScriptedApp, waitFor } from '../support/workflows.js';

/**
 * GET /v1/sessions/:id answers the session's `lastSeq` ("Seq of the latest
 * message") with a page of its messages, read by two statements: an
 * exchange appended between them must not show messages past `lastSeq`.
 */

const { app, newTenant } = useScriptedApp();
const { getSession } = sessionHelpers(app);

describe('GET /v1/sessions/:id while an exchange is appended', () => {
  it('lastSeq and the messages come from one moment', async () => {
    const tenant = await newTenant('session snapshot');
    const sessionId = await createSession(app(), tenant.key);
    const pool = app().services.database.pool;
    const writer = await pool.connect();
    try {
      // An appender that holds session_messages until it commits (as a slow
      // completion's transaction would, held here with a table lock).
      await writer.query('BEGIN');
      await writer.query('LOCK TABLE session_messages IN ACCESS EXCLUSIVE MODE');
      const reading = getSession(tenant.key, sessionId);
      await waitFor(async () => {
        const { rows } = await pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%session_messages%'`,
        );
        return rows.length > 0 ? true : undefined;
      }, 'the GET to wait for the message read');
      const workflowId = randomUUID();
      await writer.query('UPDATE sessions SET last_seq = 2, updated_at = now() WHERE id = $1', [
        sessionId,
      ]);
      await writer.query(
        `INSERT INTO session_messages (session_id, tenant_id, seq, role, content, workflow_id)
         VALUES ($1, $2, 1, 'user', 'q1', $3), ($1, $2, 2, 'assistant', 'a1', $3)`,
        [sessionId, tenant.id, workflowId],
      );
      await writer.query('COMMIT');
      const response = await reading;
      expect(response.statusCode, response.body).toBe(200);
      const body = response.json() as { lastSeq: number; messages: { seq: number }[] };
      const newest = body.messages.at(-1)?.seq ?? 0;
      expect({ lastSeq: body.lastSeq, newestMessage: newest }).toEqual({
        lastSeq: newest,
        newestMessage: newest,
      });
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      writer.release();
    }
  });
});
