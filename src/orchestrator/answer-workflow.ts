import type { Logger } from 'pino';
import type { ModelRouter, RouterCall } from '../llm/router/router.js';
import type { Db } from '../store/database.js';
import type { PipelineRows } from '../store/pipeline-rows.js';
import type { TenantEndpoints } from '../store/tenant-endpoints.js';
import { createToolRegistry, type ToolRegistry } from '../tools/registry.js';
import type { Tool } from '../tools/types.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import type { WorkflowBudget, WorkflowKind, WorkflowUsage } from '../workflows/types.js';
import { type AgentContext, spending } from './agent-context.js';
import { type ClassifierSettings, classifyQuestion, recordClassification } from './classify.js';
import {
  type PipelineRunInput,
  type PipelineSettings,
  runPipeline,
} from './pipeline/run-pipeline.js';
import { buildSystemPrompt } from './system-prompt.js';
import type { ContextLimits } from './tool-loop/context-window.js';
import { runToolLoop } from './tool-loop/loop.js';
import type { LoopResume } from './tool-loop/resume.js';
import type { TurnState } from './tool-loop/state.js';
import type { ToolCallLimits } from './tool-loop/tool-call-limits.js';
import type { LoopOptions, LoopOutcome } from './tool-loop/types.js';

/**
 * The orchestrator entry of one workflow: classify the question, then take
 * the simple path (the tool loop) or the complex one (the pipeline, whose
 * stages run the same tool loop).
 */

/** Fixed per process: built once in services.ts. */
export interface OrchestratorSettings {
  classifier: ClassifierSettings;
  /** The built-ins the configuration enables. */
  builtinTools: Tool[];
  /** What the tenant has registered (HTTP tools, MCP servers' tools), opened for one run. */
  /** `endpoints`: the tenant's rows when read already; read here otherwise. */
  tenantTools: (tenantId: string, endpoints?: TenantEndpoints) => Promise<TenantToolset>;
  /** The configured budget, for workflows created before their budget was stored with them. */
  defaultBudget: WorkflowBudget;
  /** What a turn of a catalogue model cost, at its prices. */
  costOf: LoopOptions['costOf'];
  toolOutputMaxChars: number;
  /** TOOLS_MAX_OFFERED: the workflow's tools past it are left out (withinToolCap). */
  toolsMaxOffered: number;
  toolCalls: ToolCallLimits;
  pipeline: PipelineSettings;
}

/** The tenant's tools for one run; `close` releases their connections (MCP sessions). */
export interface TenantToolset {
  tools: Tool[];
  /** Sources that could not be reached; their tools are missing from this run. */
  unavailable: { server: string; reason: string }[];
  close(): Promise<void>;
}

/** One workflow run's context and collaborators, passed by the executor's run. */
export interface AnswerWorkflowInput {
  settings: OrchestratorSettings;
  context: AgentContext;
  /** The context window of the workflow's model, for the loop's context checks. */
  limits: ContextLimits;
  router: Pick<ModelRouter, 'stream'>;
  log: Logger;
  onRouterEvent: NonNullable<RouterCall['onEvent']>;
  persistTurn: (state: TurnState) => Promise<void>;
  queueTurn: (state: TurnState) => void;
  pause: LoopOptions['pause'];
  /** Pauses a pipeline at a checkpoint or a failed stage (awaiting_input). */
  pausePipeline: PipelineRunInput['pause'];
  /** The pipeline's plan and stage attempts are read and written here. */
  db: Db;
  /** The run's lease owner, which the pipeline's writes name (PipelineRunInput's `lease`). */
  lease: string;
  throwIfStopped: () => void;
  /** Where each model turn of a tool loop begins (LoopOptions' `beforeStep`). */
  beforeStep: () => void;
  /** The persisted turns of earlier runs, when the workflow runs again. */
  resume?: LoopResume;
  /** The tenant's tools for this run, opened (and closed) by the executor. */
  toolset: Promise<TenantToolset>;
  /** Usage of a call the loop or pipeline does not count (the classification check): added with the run's. */
  spentBesideLoop: (usage: WorkflowUsage) => void;
  /** The pipeline's rows as the review that launched this run left them; read by the pipeline otherwise. */
  pipeline?: PipelineRows;
  /**
   * A run started before its workflow's insert answered (early-start.ts):
   * the first turn's tool calls run, and the pipeline starts, once it has.
   */
  created?: Promise<void>;
}

export async function answerWorkflow(given: AnswerWorkflowInput): Promise<LoopOutcome> {
  // A resumed workflow was classified by its first run: it keeps that path.
  const { kind, usage } = given.context.kind
    ? { kind: given.context.kind, usage: undefined }
    : await classify(given);
  const input = usage ? { ...given, context: spending(given.context, usage) } : given;
  const { settings, context } = input;
  const toolset = await input.toolset;
  for (const missing of toolset.unavailable) {
    context.tracker.enqueue('warning', null, 'info', {
      code: 'tool_source_unavailable',
      message: `The tools of MCP server "${missing.server}" are unavailable: ${missing.reason}`,
    });
  }
  const tools = workflowTools(settings.builtinTools, toolset.tools, context.tools, input.log);
  // Checked at the create; gone since (removed, or not listed by their MCP server now).
  const missing = context.tools.filter((name) => !tools.some((tool) => tool.name === name));
  if (missing.length > 0) {
    context.tracker.enqueue('warning', null, 'info', {
      code: 'requested_tools_unavailable',
      message: `Tools the workflow asked for are not available to this run: ${missing.join(', ')}`,
      tools: missing,
    });
  }
  const available = withinToolCap(tools, settings.toolsMaxOffered, context.tracker);
  input.throwIfStopped();
  if (kind === 'complex') {
    await input.created;
    input.throwIfStopped();
    return await answerWithPipeline(input, available);
  }
  const registry = createToolRegistry(available);
  const system = buildSystemPrompt({
    tools: registry.definitions(),
    hasSession: context.sessionId !== null,
    kind,
    now: new Date(),
  });
  return await runToolLoop({
    ...loopOptions(input, registry),
    answerRequired: true,
    system,
    messages: [...context.history, { role: 'user', content: context.input }],
    persistTurn: input.persistTurn,
    queueTurn: input.queueTurn,
    pause: input.pause,
    resume: input.resume,
    firstReplyAfter: input.created,
  });
}

/**
 * The pipeline. Its stages run the tool loop without the tools that pause
 * for the user, `ask_user` and those that require approval (a stage that
 * needs the user ends with what it has; checkpoints are where the user
 * steps in), and without persisting turns: a stage is the pipeline's step,
 * run again whole when a crash cut it off. The planner is offered the same
 * tools, so no stage names one of those.
 */
function answerWithPipeline(input: AnswerWorkflowInput, available: Tool[]): Promise<LoopOutcome> {
  const offerable = available.filter((tool) => !tool.pauses && !tool.requiresApproval);
  const stageTools = createToolRegistry(offerable);
  // The stages' tools only: a prompt naming ask_user would have a stage call a tool it lacks.
  const system = buildSystemPrompt({
    tools: stageTools.definitions(),
    hasSession: input.context.sessionId !== null,
    kind: 'complex',
    now: new Date(),
  });
  return runPipeline({
    db: input.db,
    lease: input.lease,
    rows: input.pipeline,
    context: input.context,
    settings: input.settings.pipeline,
    router: input.router,
    tokenCounts: input.limits.tokenCounts,
    system,
    toolNames: stageTools.names(),
    onRouterEvent: input.onRouterEvent,
    throwIfStopped: input.throwIfStopped,
    costOf: input.settings.costOf,
    pause: input.pausePipeline,
    runStage: ({ tools: named, ...stage }) =>
      runToolLoop({
        ...loopOptions(input, named ? namedTools(offerable, named, stage.tracker) : stageTools),
        answerRequired: false,
        ...stage,
        spentBefore: stage.spentBefore,
        persistTurn: async () => undefined,
        queueTurn: () => undefined,
        pause: async () => {
          throw new Error('a stage has no pausing tool');
        },
      }),
  });
}

/**
 * A stage's own `tools`. The plan named only tools offered when it was
 * made; one gone since (an MCP server unreachable on this run, a tool
 * deleted) is missing, and a warning on the stage's step says so.
 */
function namedTools(
  offerable: Tool[],
  named: readonly string[],
  tracker: Pick<WorkflowTracker, 'enqueue'>,
): ToolRegistry {
  const wanted = new Set(named);
  const tools = offerable.filter((tool) => wanted.has(tool.name));
  const missing = [...wanted].filter((name) => !tools.some((tool) => tool.name === name));
  if (missing.length > 0) {
    tracker.enqueue('warning', null, 'info', {
      code: 'requested_tools_unavailable',
      message: `Tools the stage names are not available to this run: ${missing.join(', ')}`,
      tools: missing,
    });
  }
  return createToolRegistry(tools);
}

/** What every tool loop of the workflow shares, the whole one or a stage's. */
function loopOptions(
  input: AnswerWorkflowInput,
  tools: ToolRegistry,
): Omit<
  LoopOptions,
  'system' | 'messages' | 'persistTurn' | 'queueTurn' | 'pause' | 'answerRequired'
> {
  const { settings, context } = input;
  return {
    tenantId: context.tenantId,
    workflowId: context.workflowId,
    router: input.router,
    tracker: context.tracker,
    model: context.model,
    tools,
    budget: context.budget,
    spentBefore: context.spentBefore,
    costOf: settings.costOf,
    toolOutputMaxChars: settings.toolOutputMaxChars,
    toolCalls: settings.toolCalls,
    limits: input.limits,
    signal: context.signal,
    onRouterEvent: input.onRouterEvent,
    throwIfStopped: input.throwIfStopped,
    beforeStep: input.beforeStep,
  };
}

/** Classifies the question and records the decision; `usage`: the model check's, when it made one. */
async function classify(
  input: AnswerWorkflowInput,
): Promise<{ kind: WorkflowKind; usage: WorkflowUsage | undefined }> {
  const { settings, context } = input;
  const checkModel = settings.classifier.checkModel;
  const classification = await classifyQuestion({
    input: context.input,
    mode: context.mode,
    keywords: settings.classifier.keywords,
    log: input.log,
    ...(checkModel
      ? {
          modelCheck: {
            router: input.router,
            model: checkModel,
            signal: context.signal,
            context: { tenantId: context.tenantId, workflowId: context.workflowId },
            onEvent: input.onRouterEvent,
            costOf: settings.costOf,
          },
        }
      : {}),
  });
  input.throwIfStopped();
  if (classification.usage) input.spentBesideLoop(classification.usage);
  await recordClassification(context.tracker, classification, {
    tenantId: context.tenantId,
    id: context.workflowId,
  });
  return { kind: classification.kind, usage: classification.usage };
}

/** Names a tools_over_limit warning lists at most; `leftOutCount` counts them all. */
const LEFT_OUT_NAMES_LISTED = 100;

/**
 * The first `max` of the workflow's tools. Model APIs refuse a request
 * with too many (OpenAI's Chat Completions more than 128): with more, the
 * run leaves the rest out and a warning names them, rather than every turn
 * failing. The order is workflowTools': built-ins, HTTP tools, MCP tools.
 */
function withinToolCap(
  tools: Tool[],
  max: number,
  tracker: Pick<WorkflowTracker, 'enqueue'>,
): Tool[] {
  if (tools.length <= max) return tools;
  const leftOut = tools.slice(max).map((tool) => tool.name);
  const listed = leftOut.slice(0, LEFT_OUT_NAMES_LISTED);
  const more = leftOut.length - listed.length;
  tracker.enqueue('warning', null, 'info', {
    code: 'tools_over_limit',
    message:
      `The workflow has ${tools.length} tools; a model is offered at most ${max} ` +
      `(TOOLS_MAX_OFFERED), so these are left out: ${listed.join(', ')}` +
      (more > 0 ? ` and ${more} more` : ''),
    limit: max,
    tools: listed,
    leftOutCount: leftOut.length,
  });
  return tools.slice(0, max);
}

/**
 * The built-ins and the tenant's tools, narrowed to the request's `tools`
 * list when it names any. On a name clash the first wins (built-ins, then
 * HTTP tools, then MCP tools) and the clash is logged: a tenant's later
 * registration must not take down its workflows.
 */
function workflowTools(
  builtins: Tool[],
  tenantTools: Tool[],
  requestedNames: readonly string[],
  log: Logger,
): Tool[] {
  const requested = new Set(requestedNames);
  const byName = new Map<string, Tool>();
  for (const tool of [...builtins, ...tenantTools]) {
    if (requested.size > 0 && !requested.has(tool.name)) continue;
    if (byName.has(tool.name)) {
      log.warn({ tool: tool.name }, 'two tools share a name; the first one is offered');
      continue;
    }
    byName.set(tool.name, tool);
  }
  return [...byName.values()];
}
