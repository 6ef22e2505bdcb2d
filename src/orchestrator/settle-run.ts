import { AppError } from '../errors.js';
import { isDatabaseUnavailable, isStatementGivenUp } from '../store/database.js';
import { LeaseLostError } from '../store/workflow-leases.js';
import {
  endingsOfOpenWork,
  FAILED_AFTER_TAKEOVERS_WORK,
  FAILED_WORK,
} from '../workflows/open-work.js';
import type { WorkflowError } from '../workflows/types.js';
import type { Run } from './workflow-run.js';

/**
 * How a run that did not end by itself ends its workflow (executor.ts):
 * stopped (a cancel, a shutdown, a lost lease), failed by an error, or
 * taken over too often.
 */

const INTERNAL_ERROR: WorkflowError = {
  code: 'internal_error',
  message: 'An internal error occurred',
};

/**
 * Ends a workflow taken over too many times without progress, without
 * running anything of it; what its last run left open ends with it
 * (open-work.ts).
 */
export async function failAfterTakeovers(run: Run, error: WorkflowError): Promise<void> {
  run.log.error(
    { code: error.code },
    'the workflow was taken over too often without progress (WORKFLOW_MAX_TAKEOVERS); it is failed',
  );
  try {
    await run.tracker.end(
      { status: 'failed', error },
      {
        eventsUnderLock: (tx) => endingsOfOpenWork(tx, keyOf(run), FAILED_AFTER_TAKEOVERS_WORK),
        countUncountedUsage: true,
      },
    );
  } catch (endError) {
    // Left leased: the next sweep after its expiry tries again (a cancel meanwhile ended it anyway).
    logSettleFailure(run, endError);
  } finally {
    run.tracker.close();
  }
}

/**
 * Ends the workflow after the run was stopped or failed. A stopped run
 * makes no transition of its own unless it was stopped by a shutdown: a
 * cancel has ended the workflow already, and a lost lease means another
 * runner owns it now. A run failed by its database going away hands the
 * workflow over, as a shutdown does, rather than failing it, and so does
 * a statement PostgreSQL gave up on for the moment. Any other
 * error fails the workflow, ending the calls and the stage attempt the run
 * had started (open-work.ts), after what it queued.
 */
export async function settleAfterError(run: Run, error: unknown): Promise<void> {
  // What the run queued is written first: nothing it reported may follow what ends or hands it over.
  await run.tracker.drain();
  try {
    switch (run.stopReason) {
      case 'cancelled':
        run.log.info('the workflow was cancelled; its run stopped');
        if (run.streamed !== '') {
          await run.repository.keepPartialAnswer(
            run.workflow.tenantId,
            run.workflow.id,
            run.streamed,
          );
        }
        return;
      case 'lease_lost':
        run.log.warn('the workflow’s lease was lost; its run stopped');
        return;
      case 'superseded':
        run.log.debug('the run started before its workflow’s insert answered was superseded');
        return;
      case 'shutdown':
        // Handed over rather than failed: another replica resumes it from its last persisted turn.
        await handOver(run);
        run.log.info(
          'the service is shutting down; the workflow is handed over to another replica',
        );
        return;
      case undefined:
        if (error instanceof LeaseLostError) {
          // Taken over while it stalled: the other run's writes stand, and this one makes none.
          run.log.warn('the workflow was taken over while its run stalled; the run stopped');
          return;
        }
        if (isDatabaseUnavailable(error) || isStatementGivenUp(error)) {
          // A database out of reach, a connection lost, or a statement
          // PostgreSQL gave up on for the moment (a lock wait past
          // lock_timeout during a migration, a deadlock) fails the step,
          // not the workflow: what the run persisted stands, and another
          // run resumes from it, at the next sweep once the lease is handed
          // over, or once it expires while the database is still away.
          // One that keeps failing ends at WORKFLOW_MAX_TAKEOVERS.
          run.log.warn(
            { err: error },
            'a database statement failed for now; the workflow is handed over to resume from its last persisted turn',
          );
          await handOver(run).catch((handOverError: unknown) =>
            run.log.warn(
              { err: handOverError },
              'handing the workflow over failed; it is resumed once its lease expires',
            ),
          );
          return;
        }
        if (isFinishedConflict(error)) {
          // Ended meanwhile through another path (a cancel whose event had not reached us yet).
          run.log.info({ code: error.code }, 'the workflow ended while it ran; its run stopped');
          return;
        }
        run.log.error({ err: error }, 'the workflow run failed');
        await run.tracker.end(
          { status: 'failed', error: INTERNAL_ERROR },
          {
            eventsUnderLock: (tx) => endingsOfOpenWork(tx, keyOf(run), FAILED_WORK),
            countUncountedUsage: true,
          },
        );
        return;
    }
  } catch (settleError) {
    logSettleFailure(run, settleError);
  }
}

/** Ends the run's lease now, so that the next sweep of any replica resumes the workflow. */
function handOver(run: Run): Promise<void> {
  return run.repository.handOverLease({
    tenantId: run.workflow.tenantId,
    id: run.workflow.id,
    owner: run.lease,
  });
}

function logSettleFailure(run: Run, error: unknown): void {
  if (isFinishedConflict(error)) {
    run.log.info({ code: error.code }, 'the workflow had already ended');
  } else {
    run.log.error({ err: error }, 'ending the failed workflow failed');
  }
}

/** The 409 a transition answers when the workflow is finished or cannot take that step any more. */
function isFinishedConflict(error: unknown): error is AppError {
  return (
    error instanceof AppError &&
    (error.code === 'workflow_finished' || error.code === 'invalid_transition')
  );
}

function keyOf(run: Run): { tenantId: string; workflowId: string } {
  return { tenantId: run.workflow.tenantId, workflowId: run.workflow.id };
}
