import type { Logger } from 'pino';
import type { Catalogue } from '../llm/catalogue.js';
import type { ModelRouter } from '../llm/router/router.js';
import type { Usage } from '../llm/types.js';
import type { WorkflowUsageRows } from '../llm/usage-ledger.js';
import type { SessionService } from '../sessions/service.js';
import type { Db } from '../store/database.js';
import type { WorkflowsRepository } from '../store/workflows.js';
import type { EventHub } from '../tracker/event-hub.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import type { TransitionBatches } from '../workflows/transition-batches.js';
import type { Workflow, WorkflowUsage } from '../workflows/types.js';
import type { OrchestratorSettings } from './answer-workflow.js';
import type { Executions, StopReason } from './executions.js';

/** The executor's collaborators, and the state of one workflow run with its stop helpers. */

export interface ExecutorOptions {
  db: Db;
  hub: EventHub;
  router: ModelRouter;
  /** Whose tokeniser estimates the session history of a workflow's model. */
  catalogue: Catalogue;
  executions: Executions;
  /** A workflow with a session sees its history and adds its question and answer to it. */
  sessions: Pick<SessionService, 'historyFor' | 'exchangeAfterTransition'>;
  /** How much session history a workflow sees (SESSION_HISTORY_* settings). */
  sessionHistory: { budgetTokens: number; floorTurns: number };
  /**
   * The usage ledger's rows of a workflow's calls (UsageLedger's
   * `rowsOf`), which its run's statements write with the events counting
   * their usage.
   */
  usageRows: (workflowId: string) => WorkflowUsageRows;
  /** Classifier, tools and loop limits of the orchestrator. */
  orchestrator: OrchestratorSettings;
  /** The NOTIFY origin of the runs' writes, and what their lease owners begin with (newLeaseOwner). */
  replicaId: string;
  /** Where the runs' transitions share statements (group commit). */
  transitionBatches?: TransitionBatches;
  log: Logger;
  /** How long a lease lasts without renewal; 30 s. */
  leaseMs?: number;
  /** How often the lease is renewed; 10 s, so two missed renewals still leave it held. */
  renewEveryMs?: number;
  /**
   * Takeovers in a row without progress a workflow may have; past it, the
   * run ends it `too_many_takeovers` instead of resuming it (WORKFLOW_MAX_TAKEOVERS).
   */
  maxTakeoversWithoutProgress: number;
}

/**
 * Why a run starts: a new workflow; the user answered its question,
 * decided on a tool call or reviewed a pipeline stage; or this replica
 * took it over from a runner that crashed or shut down.
 */
export type RunCause = 'created' | 'answered' | 'approved' | 'reviewed' | 'reclaimed';

/** The state of one workflow run; never shared between runs. */
export interface Run {
  readonly options: ExecutorOptions;
  /** As launched, then as its transitions leave it. */
  workflow: Workflow;
  readonly cause: RunCause;
  /**
   * The lease owner the statement that launched the run wrote: its writes
   * are made, and its lease renewed, released or handed over, only while
   * the workflow's row still names it. A later take of the lease, even by
   * a run on this replica, names another.
   */
  readonly lease: string;
  readonly log: Logger;
  /** Its transitions return their events alone: the run needs no workflow row back. */
  readonly tracker: WorkflowTracker<'seq'>;
  readonly repository: WorkflowsRepository;
  readonly controller: AbortController;
  readonly startedAt: number;
  stopReason: StopReason | undefined;
  answer: string;
  /** Every text delta streamed so far: kept on the workflow when it is cancelled. */
  streamed: string;
  usage: Usage | undefined;
  /** What the turns cost, each at the prices of the model that answered it (the budget's figure). */
  costUsd: number;
  /**
   * Usage the run's loop does not count, added to the workflow's usage with
   * the loop's: what runs cut off before this one (a crash, a hand-over)
   * spent, as their model calls' events say (read when this run takes the
   * workflow over, and counted against its budget), and this run's
   * classification check.
   */
  uncounted: WorkflowUsage | undefined;
  /** A shutdown asked the run to stop where its next step begins (see `beforeStep`). */
  stopBeforeNextStep: boolean;
}

/** Thrown inside a run to leave its work once it was stopped. */
export class RunStopped extends Error {
  constructor() {
    super('the run was stopped');
    this.name = 'RunStopped';
  }
}

export function stop(run: Run, reason: StopReason): void {
  if (run.stopReason) return;
  run.stopReason = reason;
  run.log.info({ reason }, 'stopping the workflow run');
  run.controller.abort();
}

export function throwIfStopped(run: Run): void {
  if (run.stopReason) throw new RunStopped();
}

/** Where a step begins: stops the run there when a shutdown asked it to (Execution's `stopBeforeNextStep`). */
export function beforeStep(run: Run): void {
  if (run.stopBeforeNextStep) stop(run, 'shutdown');
  throwIfStopped(run);
}
