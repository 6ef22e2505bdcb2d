import type { z } from 'zod';

/**
 * The tool interface of the orchestrator's tool loop. A tool is offered to
 * the model as a `ToolDefinition` (src/llm/types.ts: name, description, zod
 * parameters) and run by `execute` with its validated arguments.
 *
 * Terminology: a tool call is the model asking for a tool; its result goes
 * back to the model as a tool result message, errors included.
 */

export interface ToolContext {
  tenantId: string;
  workflowId: string;
  /** Step name of the loop iteration making the call, e.g. `turn-3`; in a pipeline stage `<stage>/attempt-<k>/turn-3`. */
  step: string;
  /** The model's id for this call; with workflow and step it makes the Idempotency-Key of HTTP tools. */
  callId: string;
  /** Aborted on cancel, on the tool's timeout and at shutdown. */
  signal: AbortSignal;
}

/** What a tool returns. `isError` results go back to the model as errors, never crash the loop. */
export interface ToolResult {
  content: string;
  isError?: boolean;
}

export interface Tool<P extends z.ZodType = z.ZodType> {
  name: string;
  description: string;
  parameters: P;
  /** Run one at a time, never alongside other calls of the same turn. */
  sequential?: boolean;
  /** Per-call timeout; the loop aborts `ctx.signal` and reports a timeout result. */
  timeoutMs: number;
  /**
   * Pausing tools (ask_user) do not run: the loop persists its state,
   * pauses the workflow and resumes with the user's answer as the result.
   */
  pauses?: boolean;
  /**
   * Each call waits for the user's approval (POST /v1/workflows/:id/approve)
   * before it runs; a declined call's result says so. Never offered to a
   * pipeline's stages, which cannot pause.
   */
  requiresApproval?: boolean;
  execute(args: z.infer<P>, ctx: ToolContext): Promise<ToolResult>;
}

/** Thrown by a tool for a failure the model should see as a tool result. */
export class ToolFailure extends Error {
  override name = 'ToolFailure';
}
