import type { Catalogue, ProviderKind } from '../llm/catalogue.js';
import type { RouterEvent } from '../llm/router/types.js';
import type { Message } from '../llm/types.js';
import type { SessionHistoryStart } from '../sessions/service.js';
import type { PipelineRows } from '../store/pipeline-rows.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
import { endingsOfOpenWork, INTERRUPTED_WORK } from '../workflows/open-work.js';
import {
  type AwaitingReason,
  addWorkflowUsage,
  type CompletionReason,
  type WorkflowUsage,
} from '../workflows/types.js';
import { createAgentContext } from './agent-context.js';
import { answerWorkflow, type TenantToolset } from './answer-workflow.js';
import { usageDetail } from './collect-text.js';
import type { PipelinePause } from './pipeline/run-pipeline.js';
import type { LoopResume } from './tool-loop/resume.js';
import { loadLoopResume, turnWrite } from './tool-loop/turns-repository.js';
import type { LoopPause, Spent } from './tool-loop/types.js';
import { beforeStep, type Run, throwIfStopped } from './workflow-run.js';

/**
 * The answering part of a workflow run: the session history, the
 * orchestrator (classify, then the tool loop), and the workflow ended, or
 * paused for a clarification, with its outcome, usage and events.
 */

/** The step name of the router's retry and fallback events. */
const MODEL_STEP = 'model';

/** Classify, then the tool loop (answer-workflow.ts); ends the workflow with its outcome. */
export async function answerWithToolLoop(
  run: Run,
  {
    firstRun,
    toolset,
    pipeline,
    created,
    historyStart,
  }: {
    /** False when the workflow ran before: it continues from its persisted steps. */
    firstRun: boolean;
    /** The tenant's tools, opened by the executor while the run begins. */
    toolset: Promise<TenantToolset>;
    /** The pipeline's rows as the review that launched the run left them. */
    pipeline?: PipelineRows;
    /** A run started before its workflow's insert answered: settles once it has (early-start.ts). */
    created?: Promise<void>;
    /** A new workflow in a session: the start of its history, read with the session by the create. */
    historyStart?: SessionHistoryStart;
  },
): Promise<void> {
  const { tracker, workflow, options } = run;
  throwIfStopped(run);
  const history = await sessionHistoryOf(run, historyStart);
  throwIfStopped(run);
  const resume = await resumePointOf(run, firstRun);
  throwIfStopped(run);
  const outcome = await answerWorkflow({
    resume,
    toolset,
    pipeline,
    created,
    settings: options.orchestrator,
    context: createAgentContext({
      workflow,
      history,
      tracker: {
        ...tracker,
        token: (text) => {
          run.streamed += text;
          tracker.token(text);
        },
      },
      signal: run.controller.signal,
      defaultBudget: options.orchestrator.defaultBudget,
      uncounted: run.uncounted,
    }),
    limits: {
      contextWindow: contextWindowOf(options.catalogue, workflow.model),
      kind: providerKindOf(options.catalogue, workflow.model),
      tokenCounts: new Map(),
    },
    router: options.router,
    log: run.log,
    onRouterEvent: (event) => report(run, event),
    persistTurn: (state) => tracker.persist(turnWrite(state)),
    queueTurn: (state) => tracker.enqueueWrite(turnWrite(state)),
    pause: (pause, spent) => pauseForInput(run, pause, spent),
    pausePipeline: (pause) => pausePipeline(run, pause),
    spentBesideLoop: (usage) => {
      run.uncounted = addWorkflowUsage(run.uncounted, usage);
    },
    db: options.db,
    lease: run.lease,
    throwIfStopped: () => throwIfStopped(run),
    beforeStep: () => beforeStep(run),
  });
  run.usage = outcome.usage;
  run.costUsd = outcome.costUsd;
  run.answer = outcome.answer;
  throwIfStopped(run);
  if (outcome.reason === 'paused') {
    // The pause recorded the usage and cleared the lease; the run ends here.
    return;
  }

  // The answer, the usage and the end commit together: one transaction, not four.
  const usage = usageOf(run);
  const usageEvents = usage ? [usage.event] : [];
  throwIfStopped(run);
  if (outcome.failure) {
    await tracker.end(
      { status: 'failed', error: outcome.failure },
      { elapsedMs: performance.now() - run.startedAt, events: usageEvents, usage: usage?.totals },
    );
    logRunOutcome(run, { status: 'failed', code: outcome.failure.code });
    return;
  }
  const session = sessionExchangeOf(run);
  const ended = await tracker.end(
    // A loop ends in model_error only with a failure, which ended the workflow above.
    { status: 'completed', answer: run.answer, reason: outcome.reason as CompletionReason },
    {
      elapsedMs: performance.now() - run.startedAt,
      events: [
        {
          type: 'answer',
          step: null,
          status: 'completed',
          detail: { text: run.answer },
          elapsedMs: null,
        },
        ...usageEvents,
      ],
      usage: usage?.totals,
      // Only with a session: a transition with other writes goes alone, not in a batch.
      ...(session ? { alsoInStatement: [session.writes], alsoSelect: [session.appended] } : {}),
    },
  );
  if (session && ended.also.session_appended === 0) {
    run.log.warn(
      'no message of the workflow was added to its session: it has them already, or the session is gone',
    );
  }
  logRunOutcome(run, { status: 'completed', reason: outcome.reason });
}

/**
 * One line per run that ends or pauses its workflow, for operators reading
 * the logs: how it ended, how long the run took, what its model calls
 * used. Runs stopped otherwise (a cancel, a shutdown, a lost lease) say
 * so where they stop (executor.ts).
 */
function logRunOutcome(
  run: Run,
  outcome: { status: 'completed' | 'failed' | 'awaiting_input'; reason?: string; code?: string },
): void {
  run.log.info(
    {
      ...outcome,
      tenantId: run.workflow.tenantId,
      model: run.workflow.model,
      elapsedMs: Math.round(performance.now() - run.startedAt),
      inputTokens: run.usage?.inputTokens ?? 0,
      outputTokens: run.usage?.outputTokens ?? 0,
      costUsd: run.costUsd,
    },
    outcome.status === 'awaiting_input' ? 'workflow run paused' : 'workflow run ended',
  );
}

/**
 * A workflow that ran before (it was answered or reviewed, or is taken
 * over from another runner) continues from what it persisted: a tool loop
 * from its turns (a pipeline reads its stage rows itself). One taken over
 * says so with a `resumed` event, after ending the calls and the stage
 * attempt its last runner left open (closeInterruptedWork).
 */
async function resumePointOf(run: Run, firstRun: boolean): Promise<LoopResume | undefined> {
  if (firstRun) return undefined;
  const key = { tenantId: run.workflow.tenantId, workflowId: run.workflow.id };
  const resume =
    run.workflow.kind === 'complex' ? undefined : await loadLoopResume(run.options.db, key);
  if (run.cause === 'reclaimed') {
    const uncounted = await workflowEventsRepository(run.options.db).uncountedUsage(key);
    if (uncounted.inputTokens + uncounted.outputTokens > 0 || uncounted.costUsd > 0) {
      run.uncounted = uncounted;
    }
    const interrupted = await closeInterruptedWork(run, key);
    await run.tracker.emit('resumed', null, 'info', {
      replica: run.options.replicaId,
      ...(resume ? { turns: resume.turns.length } : {}),
      ...(interrupted > 0 ? { interruptedCalls: interrupted } : {}),
    });
  }
  return resume;
}

/**
 * A runner that crashed or handed the workflow over mid-call wrote the
 * call's `started` event and never its end (a stopped run writes no more
 * events): each gets a `failed` event with `interrupted`, written with the
 * `resumed` event (open-work.ts). What the model sees is the persisted
 * turns': a turn cut off by a crash runs again, with new calls; a tool
 * call a hand-over interrupted went into its turn with an interrupted
 * result. A stage attempt cut off ends the same way (this run fails its
 * row as interrupted before it runs the stage again), or as its row says
 * when the runner had ended it but not yet written its event. Returns how
 * many calls.
 */
async function closeInterruptedWork(
  run: Run,
  key: { tenantId: string; workflowId: string },
): Promise<number> {
  const endings = await endingsOfOpenWork(run.options.db, key, INTERRUPTED_WORK);
  for (const event of endings)
    run.tracker.enqueue(
      event.type,
      event.step,
      event.status,
      event.detail,
      event.elapsedMs ?? undefined,
    );
  return endings.filter((event) => event.type !== 'stage').length;
}

/** running -> awaiting_input (checkpoint, stage_failed or synthesis_failed), with the event the user acts on. */
async function pausePipeline(run: Run, pause: PipelinePause): Promise<void> {
  await pauseWith(run, { reason: pause.reason, event: pause.event, spent: pause.spent });
}

/** running -> awaiting_input with the event the user acts on, and this run's usage. */
async function pauseWith(
  run: Run,
  pause: { reason: AwaitingReason; event: NewEventRow; spent: Spent },
): Promise<void> {
  throwIfStopped(run);
  run.usage = pause.spent.usage;
  run.costUsd = pause.spent.costUsd;
  const usage = usageOf(run);
  await run.tracker.transition({
    to: 'awaiting_input',
    awaitingReason: pause.reason,
    events: [pause.event, ...(usage ? [usage.event] : [])],
    ...(usage ? { usage: usage.totals } : {}),
  });
  logRunOutcome(run, { status: 'awaiting_input', reason: pause.reason });
}

/**
 * running -> awaiting_input for the tool loop: a question (clarification)
 * with its `clarification_request`, a call that requires approval
 * (tool_approval) with its `tool_approval_request`.
 */
async function pauseForInput(run: Run, pause: LoopPause, spent: Spent): Promise<void> {
  await pauseWith(run, { reason: pause.reason, spent, event: pauseEvent(pause) });
}

function pauseEvent(pause: LoopPause): NewEventRow {
  if (pause.reason === 'tool_approval') {
    const { request } = pause;
    return {
      type: 'tool_approval_request',
      step: request.step,
      status: 'paused',
      detail: { toolCallId: request.toolCallId, tool: request.tool, arguments: request.arguments },
      elapsedMs: null,
    };
  }
  const { request } = pause;
  return {
    type: 'clarification_request',
    step: request.step,
    status: 'paused',
    detail: {
      question: request.question,
      question_type: request.questionType,
      options: request.options ?? null,
      context: request.context ?? null,
      toolCallId: request.toolCallId,
    },
    elapsedMs: null,
  };
}

/**
 * The history's share of a model's context window, at most: the question,
 * the system prompt and the tool exchanges need the rest, and the loop
 * tells the model to wrap up at 70% of it.
 */
const HISTORY_WINDOW_SHARE = 0.25;

/**
 * The session's earlier questions and answers, trimmed to the history
 * budget, or to a quarter of the model's context window when that is less;
 * none without a session. A new workflow's begins with what its create read
 * with the session (`start`); a resumed one's is read up to the session's
 * seq its row keeps.
 */
async function sessionHistoryOf(run: Run, start?: SessionHistoryStart): Promise<Message[]> {
  const { options, workflow } = run;
  if (workflow.sessionId === null) return [];
  const windowShare = Math.floor(
    contextWindowOf(options.catalogue, workflow.model) * HISTORY_WINDOW_SHARE,
  );
  return options.sessions.historyFor(workflow.tenantId, workflow.sessionId, {
    ...options.sessionHistory,
    budgetTokens: Math.min(options.sessionHistory.budgetTokens, windowShare),
    ...(start ? { start } : { workflowId: workflow.id }),
    kind: providerKindOf(options.catalogue, workflow.model),
  });
}

/**
 * The writes that add the question and answer to the workflow's session,
 * in the completion's statement: whoever sees the workflow completed (its
 * `workflow_end` event, a GET) and starts the next workflow of the session
 * finds them in its history. None without a session.
 */
function sessionExchangeOf(run: Run) {
  const { workflow } = run;
  if (workflow.sessionId === null) return undefined;
  return run.options.sessions.exchangeAfterTransition({
    tenantId: workflow.tenantId,
    sessionId: workflow.sessionId,
    workflowId: workflow.id,
    question: workflow.input,
    answer: run.answer,
  });
}

/** A catalogue model's context window; 8,192 tokens, a cautious guess, for an unknown one. */
function contextWindowOf(catalogue: Catalogue, model: string): number {
  return catalogue.models.find((entry) => entry.name === model)?.contextWindow ?? 8192;
}

/** The provider kind behind a catalogue model; the scripted estimate when it is unknown. */
function providerKindOf(catalogue: Catalogue, model: string): ProviderKind {
  const entry = catalogue.models.find((candidate) => candidate.name === model);
  const provider = catalogue.providers.find((candidate) => candidate.name === entry?.provider);
  return provider?.kind ?? 'scripted';
}

/**
 * A retry or fallback as an event, queued in the order the router reports
 * them (synchronously, while it streams), so they precede the turn's end.
 */
function report(run: Run, event: RouterEvent): void {
  if (run.stopReason) return;
  if (event.type === 'retry') {
    run.tracker.enqueue('llm_retry', MODEL_STEP, 'retrying', {
      model: event.model,
      attempt: event.attempt,
      delayMs: Math.round(event.delayMs),
      error: { code: event.error.code, message: event.error.userMessage },
    });
  } else {
    run.tracker.enqueue('llm_fallback', MODEL_STEP, 'info', {
      from: event.from,
      to: event.to,
      reason: event.reason,
      ...(event.error
        ? { error: { code: event.error.code, message: event.error.userMessage } }
        : {}),
    });
  }
}

/**
 * This run's usage, with what it spent beside its loop and what runs cut
 * off before it left uncounted, as its `usage` event and as the increment
 * of the workflow's totals. The event names the workflow's model: its
 * calls may have been answered by fallbacks too, each priced and named on
 * its own `llm_call`.
 */
function usageOf(run: Run): { event: NewEventRow; totals: WorkflowUsage } | undefined {
  const own = run.usage && usageDetail(run.usage, run.costUsd);
  const totals = run.uncounted ? addWorkflowUsage(own, run.uncounted) : own;
  if (!totals) return undefined;
  return {
    event: {
      type: 'usage',
      step: null,
      status: 'info',
      detail: { model: run.workflow.model, ...totals },
      elapsedMs: null,
    },
    totals,
  };
}
