import type { ModelRouter, RouterCall } from '../../llm/router/router.js';
import type { Message, SystemPrompt, ToolCall, ToolResultMessage, Usage } from '../../llm/types.js';
import type { ToolRegistry } from '../../tools/registry.js';
import type { WorkflowTracker } from '../../tracker/tracker.js';
import type { BudgetCap, CompletionReason, WorkflowBudget } from '../../workflows/types.js';
import type { ContextLimits } from './context-window.js';
import type { RepeatFailGuard } from './repeat-guard.js';
import type { LoopResume } from './resume.js';
import type { TurnState } from './state.js';
import type { ToolCallLimits } from './tool-call-limits.js';

/**
 * Terminology: a turn is one model call of the loop; an iteration is a turn
 * offered tools. The loop's next step is one of these; `runToolLoop`
 * switches over it until it is `finished` or `paused`.
 */
export type LoopStep =
  /**
   * `after`: a write still in flight that this turn follows (the previous
   * turn's, or the workflow's insert); the turn's request goes out and
   * its reply is read meanwhile, and its tool calls run once the write has
   * committed (call-model.ts).
   */
  | { kind: 'call_model'; after?: Promise<void> }
  /** The model's tool calls of this turn; invalid ones carry their error instead of arguments. */
  | { kind: 'run_tools'; calls: PendingCall[] }
  /**
   * The turn's calls held for the user (held-calls.ts), resolved one at a
   * time in the model's order with what the user decided, until one has no
   * decision yet.
   */
  | { kind: 'resolve_held'; turn: HeldTurn }
  | { kind: 'finished'; answer: string; reason: FinishedReason }
  /**
   * A held call without the user's decision: a question (ask_user, valid
   * arguments) waits for the answer, a call of a tool that requires
   * approval for the approval; the turn is persisted already.
   */
  | { kind: 'paused'; call: ToolCall; hold: Hold };

/** Why a call is held for the user: a question to answer, or a call to approve. */
export type Hold = 'question' | 'approval';

/** A turn whose held calls are being resolved. */
export interface HeldTurn {
  assistant: NonNullable<LoopRun['pendingAssistant']>;
  /** The results of the turn's calls that were not held, and of the held ones resolved so far. */
  results: ToolResultMessage[];
  /** The held calls still without a result, in the model's order. */
  held: ToolCall[];
}

/** How the loop ended: the workflow's completion reasons, or a model error that fails it. */
export type FinishedReason = CompletionReason | 'model_error';

/** A tool call of the current turn: valid, or rejected before it could run. */
export type PendingCall =
  | { kind: 'valid'; call: ToolCall }
  | { kind: 'invalid'; id: string; name: string; reason: string };

/** What the loop needs from the workflow run; built by the orchestrator entry. */
export interface LoopOptions {
  tenantId: string;
  workflowId: string;
  router: Pick<ModelRouter, 'stream'>;
  tracker: Pick<WorkflowTracker, 'enqueue' | 'token'>;
  /** Catalogue name the turns are asked of. */
  model: string;
  system: SystemPrompt;
  /** Session history and the question. */
  messages: Message[];
  tools: ToolRegistry;
  /** The workflow's caps, checked before each turn (budget.ts). */
  budget: WorkflowBudget;
  /** Tokens and cost of the workflow's earlier runs (before a pause), counted against its budget. */
  spentBefore: { tokens: number; costUsd: number };
  /** What a turn of a catalogue model cost, at its prices. */
  costOf: (model: string, usage: Usage) => number;
  toolOutputMaxChars: number;
  /** How many tool calls a turn may make, and how many run at once (tool-call-limits.ts). */
  toolCalls: ToolCallLimits;
  /** The model's context window and how its tokens are estimated. */
  limits: ContextLimits;
  signal: AbortSignal;
  /** Retries and fallbacks, reported as events by the caller. */
  onRouterEvent: NonNullable<RouterCall['onEvent']>;
  /** Pauses the workflow for the user (awaiting_input, clarification or tool_approval). */
  pause: (pause: LoopPause, spent: Spent) => Promise<void>;
  /**
   * Called with each turn that another follows or a pause ends; resolves
   * once it is written. Nothing of the next turn but its request happens
   * before then.
   */
  persistTurn: (state: TurnState) => Promise<void>;
  /**
   * Called with the answering turn, which no turn follows: written with
   * what the workflow writes next (its end), in the same statement.
   */
  queueTurn: (state: TurnState) => void;
  /** Throws when the run was stopped (cancel, shutdown, lost lease). */
  throwIfStopped: () => void;
  /** Called where each model turn begins, before anything of it: throws when the run must stop there. */
  beforeStep: () => void;
  /**
   * Put before the turn's step (`turn-3`) in each tool call's context, and
   * so in its Idempotency-Key: a pipeline stage's `<stage>/attempt-<k>/`
   * (run-stage.ts), as models may number their call ids alike in every
   * stage and every run of one. None in the workflow's own loop.
   */
  callStepPrefix?: string;
  /** The turns of earlier runs of this workflow, continued from; absent on a first run. */
  resume?: LoopResume;
  /**
   * The loop's answer is the workflow's: an answering turn with no text
   * fails the loop (collect-text.ts `emptyAnswerFailure`) rather than
   * finishing it with an empty answer, and one cut off at the model's
   * output limit gets the warning `answer_cut_off`. A pipeline stage's
   * loop leaves an empty result to the validator, which runs the stage
   * again with that finding, and a cut-off one to its `llm_call`'s
   * `finishReason`: the workflow's answer is the synthesis's.
   */
  answerRequired: boolean;
  /**
   * A write the first turn must follow, still in flight: the workflow's
   * insert, for a run started before it answered (workflows/early-start.ts).
   */
  firstReplyAfter?: Promise<void>;
}

/** The state of one loop run; never shared, never kept after it. */
export interface LoopRun {
  readonly options: LoopOptions;
  readonly messages: Message[];
  readonly guard: RepeatFailGuard;
  /** Turns taken, the final one without tools included. */
  turns: number;
  /** Turns offered tools. */
  iterations: number;
  /** The budget cap reached, once one is: the next turn is the last, without tools. */
  wrappingUp: BudgetCap | null;
  /** Set from 70% of the context window on: the model is asked to wrap up. */
  wrapUp: boolean;
  /** A context-length error was recovered from once already. */
  overflowRecovered: boolean;
  /** The current turn's assistant message, until its tool results are in. */
  pendingAssistant: {
    content: string;
    toolCalls: ToolCall[];
    finishReason: string | null;
    /** Catalogue name of the model that answered the turn: a fallback's, not always `options.model`. */
    model: string;
  } | null;
  usage: Usage | undefined;
  /** What this run's turns cost, each at the prices of the model that answered it. */
  costUsd: number;
  failure: { code: string; message: string } | undefined;
}

/** What a run has used so far: recorded with its pause, which ends the run. */
export interface Spent {
  usage: Usage | undefined;
  costUsd: number;
}

/** What `ask_user` asks, as the `clarification_request` event carries it. */
export interface ClarificationRequest {
  step: string;
  toolCallId: string;
  question: string;
  questionType: string;
  options: string[] | undefined;
  context: string | undefined;
}

/** What a call that requires approval asks, as the `tool_approval_request` event carries it. */
export interface ApprovalRequest {
  step: string;
  toolCallId: string;
  tool: string;
  arguments: unknown;
}

/** What the loop pauses for. */
export type LoopPause =
  | { reason: 'clarification'; request: ClarificationRequest }
  | { reason: 'tool_approval'; request: ApprovalRequest };

export interface LoopOutcome {
  answer: string;
  /** `paused`: the workflow awaits the user's answer; there is no answer yet. */
  reason: FinishedReason | 'paused';
  usage: Usage | undefined;
  costUsd: number;
  failure: { code: string; message: string } | undefined;
}

export type ToolResults = ToolResultMessage[];

export function assertNever(value: never): never {
  throw new Error(`unexpected loop step: ${JSON.stringify(value)}`);
}
