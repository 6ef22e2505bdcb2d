import { conflict } from '../errors.js';
import { type AwaitingReason, isFinished, type WorkflowStatus } from './types.js';

/**
 * queued -> running -> (awaiting_input <-> running)* -> completed | failed | cancelled.
 * Cancel is possible from every unfinished status; finished is final.
 */
const ALLOWED: Record<WorkflowStatus, readonly WorkflowStatus[]> = {
  queued: ['running', 'failed', 'cancelled'],
  running: ['awaiting_input', 'completed', 'failed', 'cancelled'],
  awaiting_input: ['running', 'failed', 'cancelled'],
  completed: [],
  failed: [],
  cancelled: [],
};

export function canTransition(from: WorkflowStatus, to: WorkflowStatus): boolean {
  return ALLOWED[from].includes(to);
}

export function assertTransition(from: WorkflowStatus, to: WorkflowStatus): void {
  if (canTransition(from, to)) return;
  if (ALLOWED[from].length === 0) {
    throw conflict('workflow_finished', `The workflow is already ${from}`);
  }
  throw conflict('invalid_transition', `A ${from} workflow cannot become ${to}`);
}

/** The statuses a workflow may be in to become `to`. */
export function statusesBefore(to: WorkflowStatus): WorkflowStatus[] {
  return (Object.keys(ALLOWED) as WorkflowStatus[]).filter((from) => canTransition(from, to));
}

/**
 * What becoming `to` does to a workflow row besides its status, the same
 * whether the transition goes alone or in a batch: its pause reason (a
 * pause without one is a checkpoint), whether it pauses it (`paused_at`
 * set to its time; NULL after every other transition), starts the run,
 * ends it, and gives its lease up (an end or a pause: nothing runs it
 * until a user acts).
 */
export function transitionEffects(to: WorkflowStatus, awaitingReason?: AwaitingReason) {
  const finishes = isFinished(to);
  return {
    awaitingReason: to === 'awaiting_input' ? (awaitingReason ?? 'checkpoint') : null,
    pauses: to === 'awaiting_input',
    starts: to === 'running',
    finishes,
    clearsLease: finishes || to === 'awaiting_input',
  };
}
