import type { Message } from '../llm/types.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import type {
  Workflow,
  WorkflowBudget,
  WorkflowKind,
  WorkflowMode,
  WorkflowUsage,
} from '../workflows/types.js';

/**
 * What one run of a workflow answers from, fixed when the run starts and
 * frozen: who asks what (tenant, workflow, question, session history),
 * with which model and budget, reporting to which tracker, stopped by
 * which signal. The orchestrator reads the workflow through it alone, so
 * nothing a run changes as it goes (the workflow row after a transition,
 * the model after a fallback, the usage) can change what it answers
 * from midway; what changes is the run's own state (workflow-run.ts).
 */
export interface AgentContext {
  readonly tenantId: string;
  readonly workflowId: string;
  /** The question. */
  readonly input: string;
  /** The request's `mode`, which overrides the classifier. */
  readonly mode: WorkflowMode;
  /** The path an earlier run of the workflow was classified to; null before the first classification. */
  readonly kind: WorkflowKind | null;
  readonly sessionId: string | null;
  /** The session's earlier turns as the model sees them (trimmed to the history budget). */
  readonly history: readonly Message[];
  /** The catalogue model the request asked for; a fallback may answer instead. */
  readonly model: string;
  /** The tools the request named; empty: all the workflow's tenant has. */
  readonly tools: readonly string[];
  /** The workflow's caps: its own, or the configured ones for a workflow stored without. */
  readonly budget: Readonly<WorkflowBudget>;
  /**
   * What the workflow spent before the run's loop or pipeline: its earlier
   * runs (up to a pause), runs cut off before this one, and this run's
   * classification check (`spending`); zero on a first run without one.
   */
  readonly spentBefore: Readonly<{ tokens: number; costUsd: number }>;
  readonly tracker: AgentTracker;
  readonly signal: AbortSignal;
}

/** What the orchestrator reports through. */
export type AgentTracker = Pick<WorkflowTracker, 'emit' | 'enqueue' | 'record' | 'token'>;

/** The context of a run of `workflow`, frozen, with its arrays and records frozen too. */
export function createAgentContext(parts: {
  workflow: Workflow;
  history: Message[];
  tracker: AgentTracker;
  signal: AbortSignal;
  /** The caps of a workflow stored without a budget. */
  defaultBudget: WorkflowBudget;
  /** What runs cut off before this one spent and the workflow's usage lacks (Run.uncounted). */
  uncounted?: WorkflowUsage;
}): AgentContext {
  const { workflow } = parts;
  return Object.freeze({
    tenantId: workflow.tenantId,
    workflowId: workflow.id,
    input: workflow.input,
    mode: workflow.mode,
    kind: workflow.kind,
    sessionId: workflow.sessionId,
    history: Object.freeze([...parts.history]),
    model: workflow.model,
    tools: Object.freeze([...workflow.tools]),
    budget: Object.freeze({ ...(workflow.budget ?? parts.defaultBudget) }),
    spentBefore: Object.freeze({
      tokens:
        workflow.usage.inputTokens +
        workflow.usage.outputTokens +
        (parts.uncounted ? parts.uncounted.inputTokens + parts.uncounted.outputTokens : 0),
      costUsd: workflow.usage.costUsd + (parts.uncounted?.costUsd ?? 0),
    }),
    tracker: parts.tracker,
    signal: parts.signal,
  });
}

/**
 * The context with `usage` counted in what was spent before the loop: the
 * run's classification check, made once the context exists (it reports
 * through its tracker) and before the loop or pipeline answers from it.
 * Its call counts against the budget from the first turn on, as it counts
 * in the workflow's usage.
 */
export function spending(context: AgentContext, usage: WorkflowUsage): AgentContext {
  return Object.freeze({
    ...context,
    spentBefore: Object.freeze({
      tokens: context.spentBefore.tokens + usage.inputTokens + usage.outputTokens,
      costUsd: context.spentBefore.costUsd + usage.costUsd,
    }),
  });
}
