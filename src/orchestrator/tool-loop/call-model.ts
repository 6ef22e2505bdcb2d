import { storableText } from '../../json-limits.js';
import type { InputEstimate } from '../../llm/output-room.js';
import type { FinishReason, ModelRequest, ToolCall, Usage } from '../../llm/types.js';
import type { WorkflowUsage } from '../../workflows/types.js';
import { addUsage, cutOffAnswerWarning, emptyAnswerFailure, usageDetail } from '../collect-text.js';
import { enforceBudget } from './budget.js';
import { prepareRequest, recoverFromOverflow } from './prepare-request.js';
import type { LoopRun, LoopStep, PendingCall } from './types.js';

/** Step name of a turn's events and its tools' `ToolContext.step`. */
export const turnStep = (turn: number): string => `turn-${turn}`;

/**
 * One model turn: streams the answer text as tokens, collects the tool
 * calls, and decides the next step. Offered tools unless the loop is
 * wrapping up after reaching a budget cap, which is checked first.
 */
export async function callModel(
  run: LoopRun,
  /** A write still in flight that this turn follows: its tool calls run once it commits. */
  after?: Promise<void>,
): Promise<LoopStep> {
  const { options } = run;
  options.beforeStep();
  await enforceBudget(run);
  run.turns += 1;
  const withTools = !run.wrappingUp && options.tools.definitions().length > 0;
  if (withTools) run.iterations += 1;
  const step = turnStep(run.turns);
  const prepared = await prepareRequest(run, withTools);
  // The model asked first; the call's end names the one that answered (after an llm_fallback, another).
  options.tracker.enqueue('llm_call', step, 'started', {
    model: options.model,
    turn: run.turns,
    tools: withTools,
  });
  const started = performance.now();
  const collected = await streamTurn(run, prepared, after);
  options.throwIfStopped();
  const elapsedMs = performance.now() - started;
  const usage = spendTurn(run, collected);

  if (collected.failure) {
    options.tracker.enqueue(
      'llm_call',
      step,
      'failed',
      { model: collected.model, error: collected.failure, ...usage },
      elapsedMs,
    );
    if (collected.contextOverflow) {
      return recoverFromOverflow(run, { text: collected.text, withTools });
    }
    run.failure = collected.failure;
    return { kind: 'finished', answer: collected.text, reason: 'model_error' };
  }
  // A later turn's context-length error is a new one, recovered from anew.
  run.overflowRecovered = false;
  options.tracker.enqueue(
    'llm_call',
    step,
    'completed',
    { model: collected.model, finishReason: collected.finishReason ?? null, ...usage },
    elapsedMs,
  );
  // A turn without tools may still name some (a model ignoring tool_choice): its text is the answer.
  const calls = withTools ? collected.calls : [];
  // At a budget cap an empty last turn has an answer of its own (final-turn.ts).
  const empty =
    calls.length === 0 && options.answerRequired && !run.wrappingUp
      ? emptyAnswerFailure(collected.text, collected.finishReason)
      : undefined;
  if (empty) {
    run.failure = empty;
    return { kind: 'finished', answer: '', reason: 'model_error' };
  }
  run.pendingAssistant = {
    content: collected.text,
    toolCalls: calls.map(toToolCall),
    finishReason: collected.finishReason ?? null,
    model: collected.model,
  };
  if (calls.length === 0) {
    // A stage's result is no answer: its own llm_call's finishReason says it was cut off.
    const cutOff = options.answerRequired
      ? cutOffAnswerWarning(collected.finishReason, collected.model)
      : undefined;
    if (cutOff) options.tracker.enqueue('warning', null, 'info', cutOff);
    return {
      kind: 'finished',
      answer: collected.text,
      reason: run.wrappingUp ?? 'answered',
    };
  }
  return { kind: 'run_tools', calls };
}

interface CollectedTurn {
  text: string;
  /**
   * Catalogue name of the model that answered (or whose failure ended the
   * turn): every turn routes from `options.model`, and a fallback answers
   * that turn only.
   */
  model: string;
  calls: PendingCall[];
  /** Every attempt's that reported usage: a failed one's too (RouterStream). */
  usage: Usage | undefined;
  /** Each attempt's usage at the prices of its model. */
  costUsd: number;
  finishReason: FinishReason | undefined;
  failure: { code: string; message: string } | undefined;
  /** The failure is the model's context window being exceeded. */
  contextOverflow: boolean;
}

async function streamTurn(
  run: LoopRun,
  prepared: { request: ModelRequest; input?: InputEstimate },
  after: Promise<void> | undefined,
): Promise<CollectedTurn> {
  const { options } = run;
  const turn: CollectedTurn = {
    text: '',
    model: options.model,
    calls: [],
    usage: undefined,
    costUsd: 0,
    finishReason: undefined,
    failure: undefined,
    contextOverflow: false,
  };
  const gate = after && new WriteGate(after, options.signal);
  const parts = options.router.stream({
    model: options.model,
    request: prepared.request,
    input: prepared.input,
    tokenCounts: options.limits.tokenCounts,
    signal: gate?.signal ?? options.signal,
    context: { tenantId: options.tenantId, workflowId: options.workflowId },
    onEvent: options.onRouterEvent,
  });
  try {
    for await (const part of parts) {
      switch (part.type) {
        case 'text-delta':
          turn.text += part.text;
          if (!options.signal.aborted) options.tracker.token(part.text);
          break;
        case 'tool-call':
          turn.calls.push({ kind: 'valid', call: part.toolCall });
          break;
        case 'tool-call-invalid':
          turn.calls.push({ kind: 'invalid', id: part.id, name: part.name, reason: part.reason });
          break;
        case 'usage':
          turn.usage = addUsage(turn.usage, part.usage);
          turn.costUsd += options.costOf(parts.model, part.usage);
          break;
        case 'finish':
          turn.finishReason = part.reason;
          break;
        case 'error':
          turn.failure = { code: part.error.code, message: part.error.userMessage };
          turn.contextOverflow = part.error.kind === 'context_length_exceeded';
          break;
      }
    }
    // Half a character or a NUL from the model would fail the turn's write
    // (json-limits.ts). Whole text only: a character may be split across
    // two deltas.
    turn.text = storableText(turn.text);
    turn.model = parts.model;
    // Before the turn's tool calls run: they follow the write.
    if (gate) await gate.committed();
  } finally {
    gate?.release();
  }
  return turn;
}

/**
 * The write a turn follows, still in flight: the previous turn's, or the
 * workflow's insert. The turn's request goes out at once and its reply is
 * read as it comes, meanwhile; what the turn reports (tokens, `llm_call`)
 * goes into the tracker's queue behind the write, so nothing of the turn
 * is stored or seen before what it follows is persisted, and its tool
 * calls run only once the write has committed (`committed`). Reading the
 * reply during the write rather than after it takes its parsing off the
 * wait, where the write is the longer of the two. A failed write (the
 * workflow was cancelled meanwhile, say) aborts the request, and is what
 * `committed` throws.
 *
 * The request's signal follows the run's through a forwarding listener, as
 * the router's Attempt does (`AbortSignal.any` costs several times more;
 * router/attempt.ts), and the parts are read without a generator around
 * them, which would add a hop to every part.
 */
class WriteGate {
  readonly #controller = new AbortController();
  readonly #follow: () => void;
  readonly #written: Promise<void>;
  readonly signal = this.#controller.signal;

  constructor(
    written: Promise<void>,
    private readonly runSignal: AbortSignal,
  ) {
    this.#follow = () => this.#controller.abort(runSignal.reason);
    if (runSignal.aborted) this.#follow();
    else runSignal.addEventListener('abort', this.#follow, { once: true });
    this.#written = written.catch((error: unknown) => {
      this.#controller.abort(error);
      throw error;
    });
    // Thrown by `committed`; until then an early failure is no unhandled rejection.
    this.#written.catch(() => undefined);
  }

  /** Resolves once the write has committed; else throws its error. */
  committed(): Promise<void> {
    return this.#written;
  }

  release(): void {
    this.runSignal.removeEventListener('abort', this.#follow);
  }
}

/** An invalid call goes into history with no arguments; its error result explains why. */
function toToolCall(pending: PendingCall): ToolCall {
  return pending.kind === 'valid'
    ? pending.call
    : { id: pending.id, name: pending.name, arguments: {} };
}

/**
 * Adds the turn's usage to the run's, each attempt priced at its model
 * (the one that answered, and any that failed after reporting usage);
 * returns it as its `llm_call` event carries it.
 */
function spendTurn(
  run: LoopRun,
  { usage, costUsd }: Pick<CollectedTurn, 'usage' | 'costUsd'>,
): { usage: WorkflowUsage } | undefined {
  if (!usage) return undefined;
  run.costUsd += costUsd;
  run.usage = addUsage(run.usage, usage);
  return { usage: usageDetail(usage, costUsd) };
}
