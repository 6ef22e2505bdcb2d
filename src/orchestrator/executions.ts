import type { Logger } from 'pino';
import { within } from '../within.js';

/**
 * Why a run is stopped before it ends by itself:
 * - `cancelled`: the workflow was cancelled (here or on another replica);
 * - `shutdown`: this replica is shutting down and the grace period is over;
 * - `lease_lost`: another runner holds the workflow now;
 * - `superseded`: the run started before its workflow's insert answered,
 *   and the insert failed or read other tools (workflows/early-start.ts).
 */
export type StopReason = 'cancelled' | 'shutdown' | 'lease_lost' | 'superseded';

/** A workflow run on this replica, as the registry sees it. */
export interface Execution {
  readonly workflowId: string;
  /** Aborts the run's work; what the reason means for the workflow is the run's business. */
  stop(reason: StopReason): void;
  /**
   * Stops the run, as `shutdown`, where its next step would begin (a tool
   * loop's next model turn): the step under way finishes and is persisted.
   */
  stopBeforeNextStep(): void;
  /** Settles once the run has cleaned up; never rejects. */
  readonly done: Promise<void>;
}

/**
 * The runs in progress on this replica, so that a cancel can stop one at
 * once and a shutdown can wait for them. Holds no run state itself: each
 * run keeps its own.
 */
export function createExecutions(options: { log: Logger }) {
  const log = options.log.child({ component: 'executions' });
  const running = new Map<string, Execution>();
  let closed = false;
  let draining = false;

  return {
    /**
     * Registers a run; false when the workflow already runs here or the
     * registry no longer accepts runs (after `drain`).
     */
    add(execution: Execution): boolean {
      if (closed || running.has(execution.workflowId)) return false;
      running.set(execution.workflowId, execution);
      // Started by a request still in flight at the shutdown: it hands the workflow over at once.
      if (draining) execution.stopBeforeNextStep();
      void execution.done.finally(() => {
        if (running.get(execution.workflowId) === execution) running.delete(execution.workflowId);
      });
      return true;
    },

    /** Stops the workflow's run when it runs here; true when it did. */
    stop(workflowId: string, reason: StopReason): boolean {
      const execution = running.get(workflowId);
      execution?.stop(reason);
      return execution !== undefined;
    },

    isRunning: (workflowId: string): boolean => running.has(workflowId),

    /** The workflows running here. */
    ids: (): string[] => [...running.keys()],

    /** The run of the workflow on this replica, if any. */
    get: (workflowId: string): Execution | undefined => running.get(workflowId),

    size: (): number => running.size,

    /**
     * For shutdown: lets each run finish the step it is in for up to
     * `graceMs`, then hand its workflow over (runs started meanwhile, by
     * create requests still in flight, are waited for too); stops the rest
     * with `shutdown` once the grace is over and waits for their cleanup.
     * No run is accepted afterwards. A run that went on to its next step
     * was cut off at the grace's end: that step's model call was made
     * again elsewhere, and the handover came the whole grace late.
     */
    async drain(graceMs: number): Promise<void> {
      const deadline = Date.now() + graceMs;
      draining = true;
      for (const execution of running.values()) execution.stopBeforeNextStep();
      while (running.size > 0 && Date.now() < deadline) {
        await within(
          Promise.all([...running.values()].map((execution) => execution.done)),
          deadline - Date.now(),
        );
      }
      closed = true;
      const left = [...running.values()];
      if (left.length === 0) return;
      log.warn(
        { count: left.length, workflowIds: left.map((execution) => execution.workflowId) },
        'grace period over; interrupting the workflows still running',
      );
      for (const execution of left) execution.stop('shutdown');
      await Promise.all(left.map((execution) => execution.done));
    },
  };
}

export type Executions = ReturnType<typeof createExecutions>;
