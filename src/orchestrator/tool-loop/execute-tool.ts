import { type Tool, ToolFailure, type ToolResult } from '../../tools/types.js';

/**
 * Runs one tool call under its timeout and the run's signal. Never throws:
 * a failure, a timeout or an interruption is a result the model reads.
 * A tool that ignores its signal is abandoned at the deadline (its late
 * settlement is swallowed here on purpose, by the `settled` wrapper).
 */

export type ExecutionOutcome = 'completed' | 'failed' | 'timeout' | 'interrupted';

export interface Execution {
  result: ToolResult & { isError: boolean };
  outcome: ExecutionOutcome;
}

export interface ExecuteToolInput {
  tool: Tool;
  args: unknown;
  context: { tenantId: string; workflowId: string; step: string; callId: string };
  /** The run's signal: cancel, shutdown, lost lease. */
  signal: AbortSignal;
}

export async function executeTool(input: ExecuteToolInput): Promise<Execution> {
  const { tool, signal } = input;
  if (signal.aborted) return interrupted();
  const controller = new AbortController();
  let timedOut = false;
  const onStop = () => controller.abort(signal.reason);
  signal.addEventListener('abort', onStop, { once: true });
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new Error(`tool ${tool.name} timed out`));
  }, tool.timeoutMs);
  const aborted = new Promise<'aborted'>((resolve) =>
    controller.signal.addEventListener('abort', () => resolve('aborted'), { once: true }),
  );
  const settled = Promise.resolve()
    .then(() => tool.execute(input.args, { ...input.context, signal: controller.signal }))
    .then(
      (result): { ok: true; result: ToolResult } => ({ ok: true, result }),
      (error: unknown): { ok: false; error: unknown } => ({ ok: false, error }),
    );
  try {
    const first = await Promise.race([settled, aborted]);
    if (first === 'aborted' || (!first.ok && controller.signal.aborted)) {
      return timedOut ? timeout(tool) : interrupted();
    }
    if (first.ok) {
      const isError = first.result.isError === true;
      return {
        result: { content: first.result.content, isError },
        outcome: isError ? 'failed' : 'completed',
      };
    }
    return { result: { content: failureMessage(first.error), isError: true }, outcome: 'failed' };
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onStop);
  }
}

function failureMessage(error: unknown): string {
  if (error instanceof ToolFailure) return `Error: ${error.message}`;
  if (error instanceof Error) return `Error: the tool failed (${error.message})`;
  return 'Error: the tool failed';
}

function timeout(tool: Tool): Execution {
  return {
    result: { content: `Error: the tool timed out after ${tool.timeoutMs} ms`, isError: true },
    outcome: 'timeout',
  };
}

/** What an interrupted call leaves in history, so no call is left without a result. */
export function interrupted(): Execution {
  return {
    result: { content: 'Error: the call was interrupted before it finished', isError: true },
    outcome: 'interrupted',
  };
}
