import { AppError } from '../errors.js';
import type { Db } from '../store/database.js';
import { workflowsRepository } from '../store/workflows.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import { CANCELLED_WORK, endingsOfOpenWork } from './open-work.js';
import { type TransitionInput, WorkflowLocked } from './transitions.js';
import { AWAITING_REASONS, type Workflow, type WorkflowError } from './types.js';

/** The stable code of a workflow ended because nobody answered or reviewed it in time. */
export const INPUT_EXPIRED = 'input_expired';

export interface CancellationOptions {
  /** Where a tenant's open workflows are listed (cancelOpen). */
  db: Db;
  /** A tracker for one transition made outside the workflow's runs (the workflow service's). */
  trackerFor: (tenantId: string, workflowId: string) => WorkflowTracker;
  /** Stops a workflow's run if it runs on this replica. */
  stopLocalRun: (workflowId: string) => void;
}

/** A workflow the expiry sweep found waiting for input since before its cutoff. */
export interface ExpiredPause {
  tenantId: string;
  id: string;
  /** Its version when the sweep read it. */
  version: number;
  /** PAUSED_WORKFLOW_EXPIRY_DAYS, for the error's message. */
  expiryDays: number;
}

/** A tenant's open statuses, in the order an operator's cancel takes them: those spending first. */
const OPEN_STATUSES = ['running', 'queued', 'awaiting_input'] as const;

/** What an operator's cancel of a tenant's open workflows did. */
export interface OpenCancelled {
  cancelled: number;
  /** Open workflows are left: past the limit, or started meanwhile. */
  more: boolean;
}

/**
 * The ends of a workflow made from outside its runs as `cancelled`: a
 * client's cancel, an operator's cancel of a tenant's open workflows and
 * an expired pause, one transition for all.
 */
export function createCancellation(options: CancellationOptions) {
  /** Ends the workflow `cancelled`, `only` on the conditions given; `error` says why, when a code does. */
  async function endCancelled(
    tenantId: string,
    id: string,
    why: {
      reason: string;
      error?: WorkflowError;
      only?: Pick<TransitionInput, 'expectedVersion' | 'fromAwaiting' | 'skipLocked'>;
    },
  ): Promise<Workflow> {
    const tracker = options.trackerFor(tenantId, id);
    try {
      const { workflow } = await tracker.end(
        { status: 'cancelled', reason: why.reason, ...(why.error ? { error: why.error } : {}) },
        {
          eventsUnderLock: (tx) =>
            endingsOfOpenWork(tx, { tenantId, workflowId: id }, CANCELLED_WORK),
          // The run stopped by the cancel never ends itself: what it spent is counted here.
          countUncountedUsage: true,
          only: why.only,
        },
      );
      options.stopLocalRun(id);
      return workflow;
    } finally {
      tracker.close();
    }
  }

  /** Cancelled by an operator; false when it ended or went since it was listed (404, 409). */
  async function endUnlessGone(tenantId: string, id: string): Promise<boolean> {
    try {
      await endCancelled(tenantId, id, { reason: 'cancelled by the operator' });
      return true;
    } catch (error) {
      if (error instanceof AppError && (error.status === 404 || error.status === 409)) return false;
      throw error;
    }
  }

  return {
    /**
     * Cancels an unfinished workflow: one transaction moves it to
     * `cancelled` with its workflow_end event, after a `failed` event for
     * each model and tool call its run had in flight and for the stage
     * attempt it was running (409 when it is finished already). A run on
     * this replica is stopped at once; a run on another replica stops when
     * that event reaches its event hub. Either way its aborted calls write
     * nothing more: nothing is appended after workflow_end.
     */
    cancel(tenantId: string, id: string): Promise<Workflow> {
      return endCancelled(tenantId, id, { reason: 'cancelled by request' });
    },

    /**
     * Cancels up to `limit` of a tenant's open workflows, as a client's
     * cancel does each (its runs stopped, on whichever replica), running
     * ones first, then queued, then paused: an operator stopping what a
     * tenant spends, with a suspension say. One that ends or goes
     * meanwhile is left as it is and not counted. In pages, so that one
     * request stays short: `more` says whether open ones are left.
     */
    async cancelOpen(tenantId: string, limit: number): Promise<OpenCancelled> {
      const workflows = workflowsRepository(options.db);
      let cancelled = 0;
      for (const status of OPEN_STATUSES) {
        if (cancelled >= limit) break;
        const ids = await workflows.listIds(tenantId, { status, limit: limit - cancelled });
        for (const id of ids) {
          if (await endUnlessGone(tenantId, id)) cancelled += 1;
        }
      }
      for (const status of OPEN_STATUSES) {
        if ((await workflows.listIds(tenantId, { status, limit: 1 })).length > 0) {
          return { cancelled, more: true };
        }
      }
      return { cancelled, more: false };
    },

    /**
     * Ends a workflow paused since before the expiry's cutoff
     * (PAUSED_WORKFLOW_EXPIRY_DAYS) as a cancel does, with the error
     * `input_expired`: only while it still waits for input at `version`,
     * the one the sweep found it paused at, and only if no other
     * transaction holds its row. So an answer or review and the expiry
     * never both succeed: one that holds the row first, or has moved the
     * workflow on, wins and the workflow is left alone (false); one that
     * comes while the expiry holds the row waits for it, then gets the 409
     * an action on a cancelled workflow gets.
     */
    async expirePaused(paused: ExpiredPause): Promise<boolean> {
      try {
        await endCancelled(paused.tenantId, paused.id, {
          reason: 'input expired',
          error: {
            code: INPUT_EXPIRED,
            message: `The workflow waited for input for more than ${paused.expiryDays} days (PAUSED_WORKFLOW_EXPIRY_DAYS) and was cancelled`,
          },
          only: {
            fromAwaiting: AWAITING_REASONS,
            expectedVersion: paused.version,
            skipLocked: true,
          },
        });
        return true;
      } catch (error) {
        // Held by another transaction, or moved on since the sweep read it (a 409): not to expire now.
        if (
          error instanceof WorkflowLocked ||
          (error instanceof AppError && error.status === 409)
        ) {
          return false;
        }
        throw error;
      }
    },
  };
}

export type Cancellation = ReturnType<typeof createCancellation>;
