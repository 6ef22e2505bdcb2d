import type { Logger } from 'pino';
import { createPeriodicTask } from '../periodic.js';
import type { Db } from '../store/database.js';
import { claimExpiredLeases, newLeaseOwner } from '../store/workflow-leases.js';
import { toWorkflow } from '../workflows/rows.js';
import type { Workflow } from '../workflows/types.js';

export interface LeaseReclaimerOptions {
  db: Db;
  log: Logger;
  /** This replica's id, which the lease owners of its takeovers begin with (newLeaseOwner). */
  replicaId: string;
  leaseMs: number;
  /** Pause between the end of one sweep and the start of the next. */
  intervalMs: number;
  /**
   * Runs a taken-over workflow here; it continues from its last persisted
   * step. `lease`: the owner the takeover wrote, which the run names.
   * `takeoversWithoutProgress`: this takeover and those right before it
   * that found nothing completed since (see claimExpiredLeases).
   */
  resume: (
    workflow: Workflow,
    takeover: { lease: string; takeoversWithoutProgress: number },
  ) => void;
  /**
   * The workflows running on this replica: never taken over by its own
   * sweep, even when a lease renewal came late (its run is alive, and a
   * second run queued behind it would resume a workflow that has moved on).
   */
  runningHere: () => string[];
  /** How many workflows each sweep took over (the metrics count them). */
  onTakenOver?: (count: number) => void;
  /** Workflows taken over per sweep, so one replica does not take a whole backlog at once. */
  batchSize?: number;
  /**
   * How long a workflow nobody ever leased is left to the replica that
   * created or resumed it before a sweep takes it; 5 s.
   */
  unclaimedGraceMs?: number;
}

/**
 * Every replica sweeps for workflows that need a runner and have none
 * (their runner crashed, stalled past its lease, or handed them over at
 * shutdown), takes their leases and resumes them here. What a crashed
 * runner was doing mid-step runs again; completed steps do not.
 */
export function createLeaseReclaimer(options: LeaseReclaimerOptions) {
  const log = options.log.child({ component: 'lease-reclaimer' });
  const batchSize = options.batchSize ?? 20;

  /** Takes over what is waiting, up to one batch; returns the workflows resumed here. */
  async function sweepOnce(): Promise<Workflow[]> {
    const lease = newLeaseOwner(options.replicaId);
    const rows = await claimExpiredLeases(options.db, {
      exceptIds: options.runningHere(),
      owner: lease,
      leaseMs: options.leaseMs,
      unclaimedGraceMs: options.unclaimedGraceMs ?? 5000,
      limit: batchSize,
    });
    if (rows.length > 0) options.onTakenOver?.(rows.length);
    return rows.map((row) => {
      const workflow = toWorkflow(row);
      const takeovers = row.takeovers_without_progress;
      log.info(
        { workflowId: workflow.id, status: workflow.status, takeoversWithoutProgress: takeovers },
        'taking a workflow over',
      );
      options.resume(workflow, { lease, takeoversWithoutProgress: takeovers });
      return workflow;
    });
  }

  const task = createPeriodicTask({
    intervalMs: options.intervalMs,
    run: sweepOnce,
    log,
    failureMessage: 'lease reclaim sweep failed',
  });

  return {
    /** Sweeps now (a restarted replica resumes what it left at once), then every `intervalMs`. */
    start: task.start,

    sweepOnce,

    /** No sweep after this; waits for one in progress. Called first at shutdown. */
    stop: task.stop,
  };
}

export type LeaseReclaimer = ReturnType<typeof createLeaseReclaimer>;
