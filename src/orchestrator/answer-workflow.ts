import type { Logger } from 'pino';
import type { ModelRouter, RouterCall } from '../llm/router/router.js';
import type { Message } from '../llm/types.js';
import { createToolRegistry, type ToolRegistry } from '../tools/registry.js';
import type { Tool } from '../tools/types.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import type { Workflow } from '../workflows/types.js';
import { type ClassifierSettings, classifyQuestion, emitClassification } from './classify.js';
import { buildSystemPrompt } from './system-prompt.js';
import type { ContextLimits } from './tool-loop/context-window.js';
import { runToolLoop } from './tool-loop/loop.js';
import type { TurnState } from './tool-loop/state.js';
import type { LoopOptions, LoopOutcome } from './tool-loop/types.js';

/**
 * The orchestrator entry of one workflow: classify the question, then take
 * the simple path (the tool loop) or the complex one. Until the pipeline
 * lands, the complex path runs the tool loop too and a `warning` says so.
 */

/** Fixed per process: built once in services.ts. */
export interface OrchestratorSettings {
  classifier: ClassifierSettings;
  /** The built-ins the configuration enables. */
  builtinTools: Tool[];
  /** What the tenant has registered (HTTP tools, MCP servers' tools), opened for one run. */
  tenantTools: (tenantId: string) => Promise<TenantToolset>;
  maxIterations: number;
  toolOutputMaxChars: number;
}

/** The tenant's tools for one run; `close` releases their connections (MCP sessions). */
export interface TenantToolset {
  tools: Tool[];
  /** Sources that could not be reached; their tools are missing from this run. */
  unavailable: { server: string; reason: string }[];
  close(): Promise<void>;
}

/** One workflow's collaborators and state, passed by the executor's run. */
export interface AnswerWorkflowInput {
  settings: OrchestratorSettings;
  workflow: Workflow;
  history: Message[];
  /** The context window of the workflow's model, for the loop's context checks. */
  limits: ContextLimits;
  router: Pick<ModelRouter, 'stream'>;
  tracker: Pick<WorkflowTracker, 'emit' | 'token'>;
  signal: AbortSignal;
  log: Logger;
  onRouterEvent: NonNullable<RouterCall['onEvent']>;
  /** Resolves once the router events reported so far are persisted. */
  flushRouterEvents: () => Promise<void>;
  persistTurn: (state: TurnState) => Promise<void>;
  pause: LoopOptions['pause'];
  throwIfStopped: () => void;
  currentModel: () => string;
}

export async function answerWorkflow(input: AnswerWorkflowInput): Promise<LoopOutcome> {
  const { settings, workflow } = input;
  const checkModel = settings.classifier.checkModel;
  const classification = await classifyQuestion({
    input: workflow.input,
    mode: workflow.mode,
    keywords: settings.classifier.keywords,
    log: input.log,
    ...(checkModel
      ? {
          modelCheck: {
            router: input.router,
            model: checkModel,
            signal: input.signal,
            context: { tenantId: workflow.tenantId, workflowId: workflow.id },
            onEvent: input.onRouterEvent,
          },
        }
      : {}),
  });
  await input.flushRouterEvents();
  input.throwIfStopped();
  await emitClassification(input.tracker, classification);
  if (classification.kind === 'complex') {
    await input.tracker.emit('warning', null, 'info', {
      code: 'pipeline_unavailable',
      message:
        'The multi-stage pipeline is not available yet; the complex question is answered by the tool loop.',
    });
  }
  const toolset = await settings.tenantTools(workflow.tenantId);
  try {
    for (const missing of toolset.unavailable) {
      await input.tracker.emit('warning', null, 'info', {
        code: 'tool_source_unavailable',
        message: `The tools of MCP server "${missing.server}" are unavailable: ${missing.reason}`,
      });
    }
    const tools = workflowTools(settings.builtinTools, toolset.tools, workflow, input.log);
    input.throwIfStopped();
    return await runToolLoop({
      tenantId: workflow.tenantId,
      workflowId: workflow.id,
      router: input.router,
      tracker: input.tracker,
      model: workflow.model,
      system: buildSystemPrompt({
        tools: tools.definitions(),
        hasSession: workflow.sessionId !== null,
        kind: classification.kind,
        now: new Date(),
      }),
      messages: [...input.history, { role: 'user', content: workflow.input }],
      tools,
      maxIterations: settings.maxIterations,
      toolOutputMaxChars: settings.toolOutputMaxChars,
      limits: input.limits,
      signal: input.signal,
      onRouterEvent: input.onRouterEvent,
      flushRouterEvents: input.flushRouterEvents,
      persistTurn: input.persistTurn,
      pause: input.pause,
      throwIfStopped: input.throwIfStopped,
      currentModel: input.currentModel,
    });
  } finally {
    await toolset.close();
  }
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
  workflow: Workflow,
  log: Logger,
): ToolRegistry {
  const requested = new Set(workflow.tools);
  const byName = new Map<string, Tool>();
  for (const tool of [...builtins, ...tenantTools]) {
    if (requested.size > 0 && !requested.has(tool.name)) continue;
    if (byName.has(tool.name)) {
      log.warn({ tool: tool.name }, 'two tools share a name; the first one is offered');
      continue;
    }
    byName.set(tool.name, tool);
  }
  return createToolRegistry([...byName.values()]);
}
