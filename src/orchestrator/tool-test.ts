import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { badRequest } from '../errors.js';
import type { Tool } from '../tools/types.js';
import { type ExecutionOutcome, executeTool } from './tool-loop/execute-tool.js';

/**
 * One call of a tenant's tool outside any workflow, for its author to
 * check it (`POST /v1/tools/:id/test`): its arguments checked against its
 * parameters as a model's would be, then run as the tool loop runs it
 * (its timeout, its headers, the host rules), its answer as the loop
 * reads it (header secrets redacted), without the wrapping and cut that
 * put it into a prompt.
 */

export interface ToolTest {
  /** completed; failed (the tool answered an error, or could not be called); timeout. */
  outcome: ExecutionOutcome;
  isError: boolean;
  content: string;
  elapsedMs: number;
  /** The call's Idempotency-Key ends with it: the tool server's log finds the call by it. */
  callId: string;
}

export async function testTool(
  tool: Tool,
  options: {
    tenantId: string;
    args: unknown;
    /** Stops the call before the tool's own timeout (at most 120 s): its caller went away. */
    signal: AbortSignal;
  },
): Promise<ToolTest> {
  const parsed = tool.parameters.safeParse(options.args);
  if (!parsed.success) {
    throw badRequest('invalid_arguments', `The arguments do not fit the tool's parameters`, [
      { field: 'body.arguments', message: parsed.error.message },
    ]);
  }
  const callId = `test-${randomUUID()}`;
  const started = performance.now();
  const execution = await executeTool({
    tool,
    args: parsed.data,
    // No workflow: the test's own ids make the Idempotency-Key.
    context: { tenantId: options.tenantId, workflowId: 'test', step: 'test', callId },
    signal: options.signal,
  });
  return {
    outcome: execution.outcome,
    isError: execution.result.isError,
    content: execution.result.content,
    elapsedMs: Math.round(performance.now() - started),
    callId,
  };
}
