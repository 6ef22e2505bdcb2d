import type { DbOrTx } from '../store/database.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
import type { EventStatus, EventType } from './types.js';

/** Why calls left open end: the code of their `failed` events, and a model call's message. */
export interface CallEnding {
  code: string;
  message: string;
}

/** A run cut off by a crash or a hand-over: its calls end as `interrupted` when it is taken over. */
export const INTERRUPTED_CALLS: CallEnding = {
  code: 'interrupted',
  message:
    'The run making this call stopped (its replica crashed or shut down) before the call ended; the workflow was taken over and the turn runs again.',
};

/** A cancel: the calls in flight are aborted, and end as `cancelled` with the workflow. */
export const CANCELLED_CALLS: CallEnding = {
  code: 'cancelled',
  message: 'The workflow was cancelled during this call.',
};

/** The event that ends a call left open. */
export interface CallEndEvent extends NewEventRow {
  type: Extract<EventType, 'llm_call' | 'tool_call'>;
  status: Extract<EventStatus, 'failed'>;
}

/**
 * The `failed` events that end every `llm_call` and `tool_call` the
 * workflow's log started and never ended, in the order they started, so
 * that every call a client saw start is seen to end (a client showing
 * calls in progress would otherwise show these forever). A tool call's
 * `error` is its code, as for the tool calls a run ends itself; a model
 * call's is `{ code, message }`, as for a failed model call.
 *
 * Race-free only where no run can write the workflow's events meanwhile:
 * under the workflow row's lock (a cancel: the run's writes lock the row
 * too, and every write after the end is refused), or by the run that took
 * the workflow over.
 */
export async function endingsOfOpenCalls(
  db: DbOrTx,
  key: { tenantId: string; workflowId: string },
  ending: CallEnding,
): Promise<CallEndEvent[]> {
  const open = await workflowEventsRepository(db).listOpenCalls(key);
  return open.map((call) =>
    call.type === 'tool_call'
      ? {
          type: 'tool_call',
          step: call.step,
          status: 'failed',
          detail: { tool: call.detail.tool, callId: call.detail.callId, error: ending.code },
          elapsedMs: null,
        }
      : {
          type: 'llm_call',
          step: call.step,
          status: 'failed',
          detail: {
            ...(call.detail.model === undefined ? {} : { model: call.detail.model }),
            error: { code: ending.code, message: ending.message },
          },
          elapsedMs: null,
        },
  );
}
