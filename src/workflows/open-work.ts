import type { DbOrTx } from '../store/database.js';
import { endedAttemptError } from '../store/pipeline-transition-writes.js';
import {
  type AttemptError,
  INTERRUPTED_ATTEMPT,
  pipelinesRepository,
  type StageAttempt,
} from '../store/pipelines.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
import type { EventStatus, EventType } from './types.js';

/** Why calls left open end: the code of their `failed` events, and a model call's message. */
export interface CallEnding {
  code: string;
  message: string;
}

/**
 * How the work a run left open ends: its calls' `failed` events, and the
 * error of its stage attempts still running, as their rows get it (the
 * transition that ends the workflow fails them, or the run that takes it
 * over).
 */
export interface WorkEnding {
  calls: CallEnding;
  attempts: AttemptError;
}

/** A run cut off by a crash or a hand-over: what it left open ends as `interrupted` when it is taken over. */
export const INTERRUPTED_WORK: WorkEnding = {
  calls: {
    code: 'interrupted',
    message:
      'The run making this call stopped (its replica crashed or shut down) before the call ended; the workflow was taken over and the turn runs again.',
  },
  attempts: INTERRUPTED_ATTEMPT,
};

/** A cancel: the calls in flight are aborted, and end as `cancelled` with the workflow. */
export const CANCELLED_WORK: WorkEnding = {
  calls: { code: 'cancelled', message: 'The workflow was cancelled during this call.' },
  attempts: endedAttemptError('cancelled'),
};

/**
 * A run that failed its workflow on an unexpected error: what it had
 * started and not ended (its queued events written first) ends with it.
 */
export const FAILED_WORK: WorkEnding = {
  calls: { code: 'workflow_failed', message: 'The workflow failed during this call.' },
  attempts: endedAttemptError('failed'),
};

/**
 * A workflow failed without running (taken over too often): its last run
 * was cut off, and the end fails its attempts.
 */
export const FAILED_AFTER_TAKEOVERS_WORK: WorkEnding = {
  calls: INTERRUPTED_WORK.calls,
  attempts: endedAttemptError('failed'),
};

/** The event that ends a call or a stage attempt left open. */
export interface WorkEndEvent extends NewEventRow {
  type: Extract<EventType, 'llm_call' | 'tool_call' | 'stage'>;
  status: Extract<EventStatus, 'completed' | 'failed'>;
}

/**
 * The events that end every `llm_call`, `tool_call` and `stage` attempt
 * the workflow's log started and never ended, calls before stages and
 * each in the order they started, so that everything a client saw start
 * is seen to end (a client showing calls and stages in progress would
 * otherwise show these forever).
 *
 * A call's is `failed`: a tool call's `error` is the ending's code, as for
 * the tool calls a run ends itself; a model call's is `{ code, message }`,
 * as for a failed model call. A stage attempt's says what its row says: an
 * attempt the run ended without its event having been written yet (the
 * event goes in a statement after the row's) gets the event the run would
 * have written; one still running gets `failed` with the ending's error,
 * which its row gets too.
 *
 * Race-free only where no run can write the workflow's events meanwhile:
 * under the workflow row's lock (a cancel: the run's writes lock the row
 * too, and every write after the end is refused), or by the run that took
 * the workflow over.
 */
export async function endingsOfOpenWork(
  db: DbOrTx,
  key: { tenantId: string; workflowId: string },
  ending: WorkEnding,
): Promise<WorkEndEvent[]> {
  // Calls first: a stage attempt ends after the calls made in it.
  const open = (await workflowEventsRepository(db).listOpenWork(key)).sort(
    (a, b) => Number(a.type === 'stage') - Number(b.type === 'stage'),
  );
  // Only the stages left open are read (a pipeline's workflow; a simple one has none).
  const attempts = await pipelinesRepository(db).attemptsOfStages(key, [
    ...new Set(
      open.flatMap((started) => (started.type === 'stage' && started.step ? [started.step] : [])),
    ),
  ]);
  return open.map((started): WorkEndEvent => {
    const { detail } = started;
    switch (started.type) {
      case 'tool_call':
        return {
          type: 'tool_call',
          step: started.step,
          status: 'failed',
          detail: { tool: detail.tool, callId: detail.callId, error: ending.calls.code },
          elapsedMs: null,
        };
      case 'stage':
        return stageEnding(
          started,
          attempts.find((made) => made.stageId === started.step && made.attempt === detail.attempt),
          ending.attempts,
        );
      default:
        return {
          type: 'llm_call',
          step: started.step,
          status: 'failed',
          detail: {
            ...(detail.model === undefined ? {} : { model: detail.model }),
            error: { code: ending.calls.code, message: ending.calls.message },
          },
          elapsedMs: null,
        };
    }
  });
}

/** The end of a stage attempt, from its row (orchestrator/pipeline/run-stage.ts writes the same). */
function stageEnding(
  started: { step: string | null; detail: Record<string, unknown> },
  attempt: StageAttempt | undefined,
  error: AttemptError,
): WorkEndEvent {
  const detail = {
    stage: started.detail.stage,
    title: started.detail.title,
    attempt: started.detail.attempt,
  };
  const ended = { type: 'stage', step: started.step } as const;
  if (attempt?.status === 'completed' || attempt?.status === 'failed') {
    return {
      ...ended,
      status: attempt.status,
      detail: {
        ...detail,
        ...(attempt.validation ? { validation: attempt.validation } : {}),
        ...(attempt.error ? { error: attempt.error } : {}),
      },
      elapsedMs: attempt.elapsedMs,
    };
  }
  return { ...ended, status: 'failed', detail: { ...detail, error }, elapsedMs: null };
}
