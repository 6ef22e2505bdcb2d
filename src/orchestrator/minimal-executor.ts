import type { Transaction } from 'kysely';
import type { Logger } from 'pino';
import { AppError } from '../errors.js';
import { type Catalogue, costOf, type ProviderKind } from '../llm/catalogue.js';
import type { LlmError } from '../llm/errors.js';
import type { ModelRouter } from '../llm/router/router.js';
import type { RouterEvent } from '../llm/router/types.js';
import type { FinishReason, Message, Usage } from '../llm/types.js';
import type { SessionService } from '../sessions/service.js';
import type { Db } from '../store/database.js';
import type { Database } from '../store/schema.js';
import { type WorkflowsRepository, workflowsRepository } from '../store/workflows.js';
import type { EventHub } from '../tracker/event-hub.js';
import { createWorkflowTracker, type WorkflowTracker } from '../tracker/tracker.js';
import type { Workflow, WorkflowError, WorkflowUsage } from '../workflows/types.js';
import type { Execution, Executions, StopReason } from './executions.js';

/**
 * Until the orchestrator lands, a workflow runs one router call on its
 * input and streams the answer, so that create, events, cancel and
 * shutdown are real end to end. Each run holds its own state (a `Run`);
 * the executor itself holds none.
 */

export interface MinimalExecutorOptions {
  db: Db;
  hub: EventHub;
  router: ModelRouter;
  /** Whose tokeniser estimates the session history of a workflow's model. */
  catalogue: Catalogue;
  executions: Executions;
  /** A workflow with a session sees its history and adds its question and answer to it. */
  sessions: Pick<SessionService, 'historyFor' | 'appendExchange'>;
  /** How much session history a workflow sees (SESSION_HISTORY_* settings). */
  sessionHistory: { budgetTokens: number; floorTurns: number };
  /** Lease owner and NOTIFY origin. */
  replicaId: string;
  log: Logger;
  /** How long a lease lasts without renewal; 30 s. */
  leaseMs?: number;
  /** How often the lease is renewed; 10 s, so two missed renewals still leave it held. */
  renewEveryMs?: number;
}

/** The step name of the model call's events. */
const MODEL_STEP = 'model';

const SHUTDOWN_ERROR: WorkflowError = {
  code: 'shutdown_interrupted',
  message: 'The service shut down while the workflow was running; start it again',
};

const INTERNAL_ERROR: WorkflowError = {
  code: 'internal_error',
  message: 'An internal error occurred',
};

/** The state of one workflow run; never shared between runs. */
interface Run {
  readonly options: MinimalExecutorOptions;
  readonly workflow: Workflow;
  readonly log: Logger;
  readonly tracker: WorkflowTracker;
  readonly repository: WorkflowsRepository;
  readonly controller: AbortController;
  readonly startedAt: number;
  stopReason: StopReason | undefined;
  /** Catalogue name of the model answering now; changes on a fallback. */
  model: string;
  answer: string;
  usage: Usage | undefined;
  /** Router events are persisted one after the other, in the order they happened. */
  reports: Promise<void>;
  reportFailure: unknown;
}

/** Thrown inside a run to leave its work once it was stopped. */
class RunStopped extends Error {
  constructor() {
    super('the run was stopped');
    this.name = 'RunStopped';
  }
}

export function createMinimalExecutor(options: MinimalExecutorOptions) {
  return {
    /**
     * Runs a newly created workflow on this replica. Scheduled with
     * setImmediate so that the create request answers first and never
     * waits for (or fails with) the run.
     */
    launch(workflow: Workflow): void {
      setImmediate(() => startRun(options, workflow));
    },
  };
}

export type MinimalExecutor = ReturnType<typeof createMinimalExecutor>;

function startRun(options: MinimalExecutorOptions, workflow: Workflow): void {
  const log = options.log.child({ workflowId: workflow.id });
  const run: Run = {
    options,
    workflow,
    log,
    tracker: createWorkflowTracker({
      db: options.db,
      hub: options.hub,
      tenantId: workflow.tenantId,
      workflowId: workflow.id,
      origin: options.replicaId,
      log,
    }),
    repository: workflowsRepository(options.db),
    controller: new AbortController(),
    startedAt: performance.now(),
    stopReason: undefined,
    model: workflow.model,
    answer: '',
    usage: undefined,
    reports: Promise.resolve(),
    reportFailure: undefined,
  };
  let settle!: () => void;
  const execution: Execution = {
    workflowId: workflow.id,
    done: new Promise<void>((resolve) => {
      settle = resolve;
    }),
    stop: (reason) => stop(run, reason),
  };
  if (!options.executions.add(execution)) {
    settle();
    void refuseRun(run);
    return;
  }
  void executeRun(run).finally(settle);
}

function stop(run: Run, reason: StopReason): void {
  if (run.stopReason) return;
  run.stopReason = reason;
  run.log.info({ reason }, 'stopping the workflow run');
  run.controller.abort();
}

function throwIfStopped(run: Run): void {
  if (run.stopReason) throw new RunStopped();
}

/** The registry accepts no run: this replica is shutting down. */
async function refuseRun(run: Run): Promise<void> {
  run.log.warn('the service is shutting down; the workflow is not started');
  try {
    await run.tracker.end({ status: 'failed', error: SHUTDOWN_ERROR });
  } catch (error) {
    logSettleFailure(run, error);
  } finally {
    run.tracker.close();
  }
}

/** The whole run; never rejects: every failure ends in the log and, when possible, in the workflow. */
async function executeRun(run: Run): Promise<void> {
  const { options, workflow } = run;
  const lease = { tenantId: workflow.tenantId, id: workflow.id, owner: options.replicaId };
  let heartbeat: NodeJS.Timeout | undefined;
  let unsubscribe: (() => void) | undefined;
  let leased = false;
  try {
    const claimed = await run.repository.claimLease({ ...lease, leaseMs: leaseMsOf(options) });
    if (!claimed) {
      run.log.info('the workflow is finished or leased by another runner; not running it');
      return;
    }
    leased = true;
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
      claimed.last_seq,
    );
    await run.tracker.begin({ mode: workflow.mode, model: workflow.model });
    await answerWithOneModelCall(run);
  } catch (error) {
    await settleAfterError(run, error);
  } finally {
    clearInterval(heartbeat);
    unsubscribe?.();
    run.tracker.close();
    // A final transition has cleared the lease already; this covers a run that ended without one.
    if (leased) {
      await run.repository
        .releaseLease(lease)
        .catch((error: unknown) => run.log.error({ err: error }, 'releasing the lease failed'));
    }
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

function leaseMsOf(options: MinimalExecutorOptions): number {
  return options.leaseMs ?? 30_000;
}

async function answerWithOneModelCall(run: Run): Promise<void> {
  const { tracker, workflow } = run;
  throwIfStopped(run);
  const history = await sessionHistoryOf(run);
  throwIfStopped(run);
  await tracker.emit('llm_call', MODEL_STEP, 'started', { model: run.model });
  const callStarted = performance.now();
  let finishReason: FinishReason | undefined;
  let failure: LlmError | undefined;
  for await (const part of run.options.router.stream({
    model: workflow.model,
    request: { messages: [...history, { role: 'user', content: workflow.input }] },
    signal: run.controller.signal,
    context: { tenantId: workflow.tenantId, workflowId: workflow.id },
    onEvent: (event) => report(run, event),
  })) {
    switch (part.type) {
      case 'text-delta':
        run.answer += part.text;
        if (!run.stopReason) tracker.token(part.text);
        break;
      case 'usage':
        run.usage = part.usage;
        break;
      case 'finish':
        finishReason = part.reason;
        break;
      case 'error':
        failure = part.error;
        break;
      case 'tool-call':
      case 'tool-call-invalid':
        // No tools are offered to this call; a model calling one anyway is ignored.
        run.log.warn({ part: part.type }, 'the model called a tool although none was offered');
        break;
    }
  }
  await run.reports;
  throwIfStopped(run);
  if (run.reportFailure) throw run.reportFailure;
  const elapsedMs = performance.now() - callStarted;

  if (failure) {
    await tracker.emit(
      'llm_call',
      MODEL_STEP,
      'failed',
      { model: run.model, error: { code: failure.code, message: failure.userMessage } },
      elapsedMs,
    );
    await recordUsage(run);
    throwIfStopped(run);
    await tracker.end(
      { status: 'failed', error: { code: failure.code, message: failure.userMessage } },
      performance.now() - run.startedAt,
    );
    return;
  }

  await tracker.emit(
    'llm_call',
    MODEL_STEP,
    'completed',
    { model: run.model, finishReason: finishReason ?? null },
    elapsedMs,
  );
  throwIfStopped(run);
  await tracker.emit('answer', null, 'completed', { text: run.answer });
  await recordUsage(run);
  throwIfStopped(run);
  await tracker.end(
    { status: 'completed', answer: run.answer },
    performance.now() - run.startedAt,
    (tx) => appendToSession(run, tx),
  );
}

/** The session's earlier questions and answers, trimmed to the history budget; none without a session. */
async function sessionHistoryOf(run: Run): Promise<Message[]> {
  const { options, workflow } = run;
  if (workflow.sessionId === null) return [];
  return options.sessions.historyFor(workflow.tenantId, workflow.sessionId, {
    ...options.sessionHistory,
    kind: providerKindOf(options.catalogue, workflow.model),
  });
}

/**
 * Adds the question and answer to the workflow's session, in the
 * completion's transaction: whoever sees the workflow completed (its
 * `workflow_end` event, a GET) and starts the next workflow of the session
 * finds them in its history.
 */
async function appendToSession(run: Run, tx: Transaction<Database>): Promise<void> {
  const { workflow } = run;
  if (workflow.sessionId === null) return;
  const appended = await run.options.sessions.appendExchange(
    {
      tenantId: workflow.tenantId,
      sessionId: workflow.sessionId,
      workflowId: workflow.id,
      question: workflow.input,
      answer: run.answer,
    },
    tx,
  );
  if (!appended) run.log.warn('the workflow’s session no longer exists; its answer is not added');
}

/** The provider kind behind a catalogue model; the scripted estimate when it is unknown. */
function providerKindOf(catalogue: Catalogue, model: string): ProviderKind {
  const entry = catalogue.models.find((candidate) => candidate.name === model);
  const provider = catalogue.providers.find((candidate) => candidate.name === entry?.provider);
  return provider?.kind ?? 'scripted';
}

/**
 * Persists a retry or fallback as an event. The router reports them
 * synchronously, so the writes are chained in order; a failed write is
 * kept and fails the run once the stream ends.
 */
function report(run: Run, event: RouterEvent): void {
  if (event.type === 'fallback') run.model = event.to;
  run.reports = run.reports
    .then(async () => {
      if (run.stopReason || run.reportFailure) return;
      if (event.type === 'retry') {
        await run.tracker.emit('llm_retry', MODEL_STEP, 'retrying', {
          model: event.model,
          attempt: event.attempt,
          delayMs: Math.round(event.delayMs),
          error: { code: event.error.code, message: event.error.userMessage },
        });
      } else {
        await run.tracker.emit('llm_fallback', MODEL_STEP, 'info', {
          from: event.from,
          to: event.to,
          reason: event.reason,
          ...(event.error
            ? { error: { code: event.error.code, message: event.error.userMessage } }
            : {}),
        });
      }
    })
    .catch((error: unknown) => {
      run.reportFailure ??= error;
    });
}

/** The `usage` event and the workflow's totals, when the model reported usage. */
async function recordUsage(run: Run): Promise<void> {
  if (!run.usage) return;
  throwIfStopped(run);
  const entry = run.options.router.entry(run.model);
  const usage: WorkflowUsage = {
    inputTokens: run.usage.inputTokens,
    outputTokens: run.usage.outputTokens,
    cachedInputTokens: run.usage.cachedInputTokens,
    costUsd: entry ? costOf(entry, run.usage) : 0,
  };
  await run.tracker.emit('usage', null, 'info', { model: run.model, ...usage });
  await run.repository.addUsage(run.workflow.tenantId, run.workflow.id, usage);
}

/**
 * Ends the workflow after the run was stopped or failed. A stopped run
 * makes no transition of its own unless it was stopped by a shutdown: a
 * cancel has ended the workflow already, and a lost lease means another
 * runner owns it now.
 */
async function settleAfterError(run: Run, error: unknown): Promise<void> {
  try {
    switch (run.stopReason) {
      case 'cancelled':
        run.log.info('the workflow was cancelled; its run stopped');
        return;
      case 'lease_lost':
        run.log.warn('the workflow’s lease was lost; its run stopped');
        return;
      case 'shutdown':
        await run.tracker.end({ status: 'failed', error: SHUTDOWN_ERROR });
        return;
      case undefined:
        if (isFinishedConflict(error)) {
          // Ended meanwhile through another path (a cancel whose event had not reached us yet).
          run.log.info({ code: error.code }, 'the workflow ended while it ran; its run stopped');
          return;
        }
        run.log.error({ err: error }, 'the workflow run failed');
        await run.tracker.end({ status: 'failed', error: INTERNAL_ERROR });
        return;
    }
  } catch (settleError) {
    logSettleFailure(run, settleError);
  }
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
