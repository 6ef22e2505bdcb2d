import { sql } from 'kysely';
import type { NewEventRow } from '../../src/store/workflow-events.js';
import { createTransitionBatches } from '../../src/workflows/transition-batches.js';
import {
  type TransitionInput,
  transitionWorkflow,
  type WorkflowTransitionInput,
} from '../../src/workflows/transitions.js';
import type { TrackerDatabase } from './tracker-database.js';

/** What the tests of transition batches (src/workflows/transition-batches.ts) build their transitions and checks from. */

export function event(type: string, detail: Record<string, unknown> = {}): NewEventRow {
  return { type, step: null, status: 'completed', detail, elapsedMs: null };
}

/** A run's start with its first turn, as a run makes it. */
export function start(
  setup: TrackerDatabase,
  workflowId: string,
  extra: Partial<WorkflowTransitionInput> = {},
): WorkflowTransitionInput {
  return {
    tenantId: setup.tenantId,
    workflowId,
    to: 'running',
    kind: 'simple',
    events: [event('workflow_start'), event('classification')],
    turnRows: [{ turn: 1, state: JSON.stringify({ schemaVersion: 1, turn: 1, of: workflowId }) }],
    durable: false,
    origin: 'replica-a',
    ...extra,
  };
}

/** A workflow's end, as a run makes it. */
export function end(setup: TrackerDatabase, workflowId: string): WorkflowTransitionInput {
  return {
    tenantId: setup.tenantId,
    workflowId,
    to: 'completed',
    result: { answer: 'done', reason: 'answered' },
    events: [event('workflow_end')],
    origin: 'replica-a',
  };
}

/** Batches that record, in order, the transitions they make alone. */
export function spiedBatches(
  setup: TrackerDatabase,
  maxInFlight: number,
  alone: TransitionInput[],
) {
  const db = setup.handle.db;
  return createTransitionBatches({
    db,
    maxInFlight,
    maxItems: 64,
    maxChars: 1_000_000,
    alone: (input) => {
      alone.push(input);
      return transitionWorkflow(db, input);
    },
  });
}

/**
 * The transactions that wrote each workflow's row, events and turns: rows
 * written in one transaction share its id (`xmin`).
 */
export async function writers(setup: TrackerDatabase, workflowIds: string[]) {
  const { rows } = await sql<{ id: string; row: string; events: string[]; turns: string[] }>`
    SELECT w.id, w.xmin::text AS row,
      (SELECT array_agg(DISTINCT e.xmin::text) FROM workflow_events e WHERE e.workflow_id = w.id) AS events,
      (SELECT array_agg(DISTINCT t.xmin::text) FROM workflow_turns t WHERE t.workflow_id = w.id) AS turns
    FROM workflows w WHERE w.id = ANY(${workflowIds}::uuid[])`.execute(setup.handle.db);
  return new Map(rows.map((row) => [row.id, row]));
}
