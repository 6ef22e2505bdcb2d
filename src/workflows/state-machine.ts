import { conflict } from '../errors.js';
import type { WorkflowStatus } from './types.js';

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
