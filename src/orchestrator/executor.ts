import { workflowsRepository } from '../store/workflows.js';
import { createWorkflowTracker } from '../tracker/tracker.js';
import type { RunLaunch, RunPreload } from '../workflows/service.js';
import type { WorkflowError } from '../workflows/types.js';
import type { TenantToolset } from './answer-workflow.js';
import { classificationEvent, classifyWithoutModel } from './classify.js';
import type { Execution } from './executions.js';
import { answerWithToolLoop } from './run-answer.js';
import { failAfterTakeovers, settleAfterError } from './settle-run.js';
import { type ExecutorOptions, type Run, type RunCause, stop } from './workflow-run.js';

export type { ExecutorOptions } from './workflow-run.js';

/**
 * Runs workflows on this replica: holds the lease, listens for a cancel,
 * answers through the orchestrator (classify, then the tool loop) and ends
 * the workflow. Each run holds its own state (a `Run`); the executor
 * itself holds none.
 */

export function createExecutor(options: ExecutorOptions) {
  return {
    /**
     * Runs a workflow on this replica, whose run holds its lease already:
     * the statement that made the workflow runnable took it (the create's
     * insert, a user's answer or review, the sweep's reclaim) with the
     * owner `launch.lease`. Scheduled with setImmediate so that the request
     * answers first and never waits for (or fails with) the run.
     */
    launch(launch: Launch): void {
      setImmediate(() => startRun(options, launch));
    },
  };
}

export type Executor = ReturnType<typeof createExecutor>;

/** What a launch hands its run: a RunLaunch, or a sweep's takeover. */
export interface Launch extends Omit<RunLaunch, 'cause'> {
  cause: RunCause;
}

function startRun(options: ExecutorOptions, launch: Launch): void {
  const { workflow, cause, lease } = launch;
  const preload = launch.preload ?? {};
  // The workflow's previous run here is still unwinding (it just paused,
  // and the user was quick): start once it is done.
  const previous = options.executions.get(workflow.id);
  if (previous) {
    startAfter(previous, options, launch);
    return;
  }
  const log = options.log.child({ workflowId: workflow.id });
  const run: Run = {
    options,
    workflow,
    cause,
    lease,
    log,
    tracker: createWorkflowTracker({
      db: options.db,
      hub: options.hub,
      tenantId: workflow.tenantId,
      workflowId: workflow.id,
      origin: options.replicaId,
      heldBy: lease,
      log,
      created: preload.created,
      ledgerRows: options.usageRows(workflow.id),
      transitionBatches: options.transitionBatches,
      returning: 'seq',
    }),
    repository: workflowsRepository(options.db),
    controller: new AbortController(),
    startedAt: performance.now(),
    stopReason: undefined,
    answer: '',
    streamed: '',
    usage: undefined,
    costUsd: 0,
    uncounted: undefined,
    stopBeforeNextStep: false,
  };
  let settle!: () => void;
  const execution: Execution = {
    workflowId: workflow.id,
    done: new Promise<void>((resolve) => {
      settle = resolve;
    }),
    stop: (reason) => stop(run, reason),
    stopBeforeNextStep: () => {
      run.stopBeforeNextStep = true;
    },
  };
  if (!options.executions.add(execution)) {
    settle();
    refuseRun(run, preload.created);
    return;
  }
  void executeRun(run, preload).finally(settle);
}

/**
 * Starts the run once the workflow's previous run here is done, unless
 * the workflow ended meanwhile: a cancel made while it waits stops the
 * previous run (the only one registered) and must stop this one too, which
 * would otherwise begin past the cancel's `workflow_end` and call the model
 * for a cancelled workflow. It listens as a run does, from the launch's seq.
 */
function startAfter(previous: Execution, options: ExecutorOptions, launch: Launch): void {
  const { workflow } = launch;
  let ended = false;
  const unsubscribe = options.hub.subscribe(
    workflow.id,
    {
      onEvent: (event) => {
        if (event.type === 'workflow_end') ended = true;
      },
      onTokens: () => undefined,
    },
    workflow.lastSeq,
  );
  void previous.done.then(() => {
    unsubscribe();
    if (!ended) return startRun(options, launch);
    options.log.info({ workflowId: workflow.id }, 'the workflow ended before its run could start');
  });
}

/**
 * The registry accepts no run: this replica is shutting down, or the
 * workflow runs here already. The workflow is left unleased (one created
 * here gives up the lease it was inserted with); another replica's sweep
 * takes it over. A run launched while its insert was in flight (`created`)
 * releases the lease once the insert has committed: before, the release
 * would find no row, and the workflow would wait for its lease to expire.
 */
function refuseRun(run: Run, created: Promise<void> | undefined): void {
  run.log.info('the workflow is not run here; another replica takes it over');
  run.tracker.close();
  const { tenantId, id } = run.workflow;
  const release = () =>
    run.repository
      .releaseLease({ tenantId, id, owner: run.lease })
      .catch((error: unknown) => run.log.error({ err: error }, 'releasing the lease failed'));
  // Superseded: the insert failed (its caller is told), or read other tools and the run launched after it releases the lease.
  (created ?? Promise.resolve()).then(release, (error: unknown) =>
    run.log.debug({ err: error }, 'the refused run was superseded; it has no lease to release'),
  );
}

/** The whole run; never rejects: every failure ends in the log and, when possible, in the workflow. */
async function executeRun(run: Run, preload: RunPreload): Promise<void> {
  const exhausted = takeoversExhausted(run, preload);
  if (exhausted) return failAfterTakeovers(run, exhausted);
  const { options, workflow } = run;
  const lease = { tenantId: workflow.tenantId, id: workflow.id, owner: run.lease };
  let heartbeat: NodeJS.Timeout | undefined;
  let unsubscribe: (() => void) | undefined;
  let leased = true;
  // The tenant's tools are read, and its MCP servers connected (network
  // round trips to each server), while the run begins: neither waits for
  // the other. A run that does not go ahead closes them unused.
  const toolset = options.orchestrator.tenantTools(workflow.tenantId, preload.endpoints);
  toolset.catch(() => undefined); // awaited by the run, or in `finally`
  // Started before its insert answered (early-start.ts): superseded, it
  // stops having done nothing, and leaves the lease to the run replacing it.
  preload.created?.catch(() => stop(run, 'superseded'));
  try {
    heartbeat = startHeartbeat(run, lease);
    // A cancel committed on any replica reaches this replica's hub as the
    // workflow_end event; that is how a run elsewhere learns of it.
    unsubscribe = options.hub.subscribe(
      workflow.id,
      {
        onEvent: (event) => {
          if (event.type === 'workflow_end' && event.status === 'cancelled') stop(run, 'cancelled');
        },
        onTokens: () => undefined,
      },
      workflow.lastSeq,
    );
    // Queued: a first run. Running: the workflow was resumed (answered, or taken over).
    const firstRun = run.workflow.status === 'queued';
    if (firstRun) {
      const classification = classifyWithoutModel({
        input: workflow.input,
        mode: workflow.mode,
        settings: options.orchestrator.classifier,
      });
      // Not waited for: the start is written in the statement of the run's
      // first turn (one round trip fewer per workflow). A start the
      // database refuses fails that statement too, and so the run.
      run.tracker
        .begin(
          { mode: workflow.mode, model: workflow.model },
          classification && {
            kind: classification.kind,
            events: [classificationEvent(classification)],
          },
          { deferred: true },
        )
        .catch((error: unknown) => run.log.debug({ err: error }, 'the workflow did not start'));
      // With its kind when classified here, so the orchestrator does not classify again.
      run.workflow = {
        ...run.workflow,
        status: 'running',
        kind: classification?.kind ?? run.workflow.kind,
      };
    }
    await answerWithToolLoop(run, {
      firstRun,
      toolset,
      pipeline: preload.pipeline,
      created: preload.created,
      historyStart: preload.historyStart,
    });
    // It ended or paused: that transition cleared the lease.
    leased = false;
  } catch (error) {
    await settleAfterError(run, error);
  } finally {
    clearInterval(heartbeat);
    unsubscribe?.();
    run.tracker.close();
    await closeToolset(run, toolset);
    // Covers a run that failed or stopped without a transition clearing the lease.
    if (leased && run.stopReason !== 'superseded') {
      await run.repository
        .releaseLease(lease)
        .catch((error: unknown) => run.log.error({ err: error }, 'releasing the lease failed'));
    }
  }
}

/**
 * Why a workflow the sweep took over is not resumed: more takeovers in a
 * row than allowed found nothing completed since the one before. Its runs
 * keep stopping at the same point, and the run may be what stops them (a
 * crash it causes, a statement that always loses its connection): resumed
 * again, it would be passed from replica to replica forever, a model call
 * at least each time.
 */
function takeoversExhausted(run: Run, preload: RunPreload): WorkflowError | undefined {
  const takeovers = preload.takeoversWithoutProgress;
  const max = run.options.maxTakeoversWithoutProgress;
  if (takeovers === undefined || takeovers <= max) return undefined;
  return {
    code: 'too_many_takeovers',
    message: `The workflow's run stopped ${takeovers} times in a row before completing a step, more than the ${max} allowed; it is not resumed again`,
  };
}

/** Closes the run's tool connections (MCP sessions); a toolset that failed to open has none. */
async function closeToolset(run: Run, toolset: Promise<TenantToolset>): Promise<void> {
  try {
    await (await toolset).close();
  } catch (error) {
    run.log.warn({ err: error }, 'opening or closing the tenant’s tools failed');
  }
}

function startHeartbeat(
  run: Run,
  lease: { tenantId: string; id: string; owner: string },
): NodeJS.Timeout {
  const leaseMs = leaseMsOf(run.options);
  const timer = setInterval(() => {
    run.repository
      .renewLease({ ...lease, leaseMs })
      .then((held) => {
        if (!held && !run.stopReason) stop(run, 'lease_lost');
      })
      .catch((error: unknown) =>
        run.log.warn({ err: error }, 'renewing the lease failed; trying again at the next beat'),
      );
  }, run.options.renewEveryMs ?? 10_000);
  timer.unref();
  return timer;
}

function leaseMsOf(options: ExecutorOptions): number {
  return options.leaseMs ?? 30_000;
}
