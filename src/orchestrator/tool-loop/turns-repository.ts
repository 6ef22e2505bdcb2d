import { sql } from 'kysely';
import type { Message } from '../../llm/types.js';
import type { Db } from '../../store/database.js';
import { type TurnRow, workflowEventsRepository } from '../../store/workflow-events.js';
import { type ApprovalDecision, answerKey, type LoopResume } from './resume.js';
import { messagesOfTurn, parseTurnState, type TurnState } from './state.js';

/**
 * A turn as a row, written in the statement of the tracker's next batch
 * (tracker.persist): with the turn's events, or with the transition that
 * ends or pauses the workflow. A turn cut off midway runs again
 * (at-least-once), so a second write of the same turn number keeps the
 * first one. Like the events, it is committed without waiting for the WAL
 * flush unless the transition is durable: a replica's crash never loses
 * it, and one lost to a PostgreSQL crash only runs again, like a turn cut
 * off; the workflow's end, which the client sees, is durable and flushes
 * every turn before it.
 */
export function turnWrite(state: TurnState): TurnRow {
  return { turn: state.turn, state: JSON.stringify(state) };
}

/** The tool loop's turns as rows, read back in order to rebuild the conversation on another replica. */
export function workflowTurnsRepository(db: Db) {
  return {
    /** The workflow's turns in order, each parsed with its version's schema. */
    async list(tenantId: string, workflowId: string): Promise<TurnState[]> {
      const rows = await db
        .selectFrom('workflow_turns')
        .select(['state'])
        .where('tenant_id', '=', tenantId)
        .where('workflow_id', '=', workflowId)
        .orderBy(sql`turn`)
        .execute();
      return rows.map((row) => parseTurnState(row.state));
    },
  };
}

/** The conversation after the persisted turns: what follows the question in the next request. */
export async function loadLoopHistory(
  db: Db,
  key: { tenantId: string; workflowId: string },
): Promise<{ turns: number; messages: Message[] }> {
  const turns = await workflowTurnsRepository(db).list(key.tenantId, key.workflowId);
  return { turns: turns.length, messages: turns.flatMap(messagesOfTurn) };
}

/**
 * What a loop continues from: the persisted turns and what the user
 * decided on the calls they held: answers (`clarification_answer`) and
 * approvals (`tool_approval`), each written with the transition that
 * resumed the workflow, so a decision is never lost between the two.
 */
export async function loadLoopResume(
  db: Db,
  key: { tenantId: string; workflowId: string },
): Promise<LoopResume> {
  const [turns, decisionEvents] = await Promise.all([
    workflowTurnsRepository(db).list(key.tenantId, key.workflowId),
    workflowEventsRepository(db).listOfType({
      ...key,
      type: ['clarification_answer', 'tool_approval'],
    }),
  ]);
  const answers = new Map<string, string>();
  const approvals = new Map<string, ApprovalDecision>();
  for (const event of decisionEvents) {
    const { toolCallId, answer, approved, reason } = event.detail as {
      toolCallId?: unknown;
      answer?: unknown;
      approved?: unknown;
      reason?: unknown;
    };
    if (typeof toolCallId !== 'string') continue;
    const callKey = answerKey(event.step, toolCallId);
    if (event.type === 'clarification_answer' && typeof answer === 'string') {
      answers.set(callKey, answer);
    } else if (event.type === 'tool_approval' && typeof approved === 'boolean') {
      approvals.set(callKey, { approved, reason: typeof reason === 'string' ? reason : null });
    }
  }
  return { turns, answers, approvals };
}
