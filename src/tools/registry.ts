import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { ToolDefinition } from '../llm/types.js';
import { askUserTool } from './builtins/ask-user.js';
import { calculatorTool } from './builtins/calculator.js';
import { createCurrentTimeTool } from './builtins/current-time.js';
import { createHttpFetchTool } from './builtins/http-fetch.js';
import type { Tool } from './types.js';

/**
 * The tools of one workflow, assembled from the built-ins the
 * configuration enables and what the tenant has registered. The model is
 * offered `definitions()`; the tool loop finds a call's tool with `get`.
 */
export interface ToolRegistry {
  /** In registration order, the same every call, so the prompt prefix stays cacheable. */
  definitions(): ToolDefinition[];
  get(name: string): Tool | undefined;
  names(): string[];
}

/** What both vendors accept as a function name. */
export const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** Names no tenant tool may take. */
export const BUILTIN_TOOL_NAMES = ['ask_user', 'calculator', 'current_time', 'http_fetch'] as const;

export function createToolRegistry(tools: Tool[]): ToolRegistry {
  const byName = new Map<string, Tool>();
  for (const tool of tools) {
    if (!TOOL_NAME.test(tool.name)) {
      throw toolConfigurationError(
        'invalid_tool_name',
        `tool name "${tool.name}" must be 1 to 64 letters, digits, _ or -`,
      );
    }
    if (byName.has(tool.name)) {
      throw toolConfigurationError('duplicate_tool_name', `two tools are named "${tool.name}"`);
    }
    byName.set(tool.name, tool);
  }
  const definitions = [...byName.values()].map(
    (tool): ToolDefinition => ({
      name: tool.name,
      description: tool.description,
      parameters: tool.parameters,
    }),
  );
  return {
    definitions: () => [...definitions],
    get: (name) => byName.get(name),
    names: () => [...byName.keys()],
  };
}

export type BuiltinToolsConfig = Pick<
  Config,
  | 'HTTP_FETCH_ALLOWED_HOSTS'
  | 'HTTP_TOOLS_ALLOW_PRIVATE'
  | 'HTTP_FETCH_MAX_BYTES'
  | 'HTTP_FETCH_TIMEOUT_MS'
>;

/** The built-ins this configuration enables: http_fetch only with a non-empty allowlist. */
export function builtinTools(config: BuiltinToolsConfig): Tool[] {
  const tools: Tool[] = [askUserTool, calculatorTool, createCurrentTimeTool()];
  if (config.HTTP_FETCH_ALLOWED_HOSTS.length > 0) {
    tools.push(
      createHttpFetchTool({
        allowedHosts: config.HTTP_FETCH_ALLOWED_HOSTS,
        allowPrivate: config.HTTP_TOOLS_ALLOW_PRIVATE,
        maxBytes: config.HTTP_FETCH_MAX_BYTES,
        timeoutMs: config.HTTP_FETCH_TIMEOUT_MS,
      }),
    );
  }
  return tools;
}

function toolConfigurationError(code: string, userMessage: string): AppError {
  return new AppError({ code, status: 500, userMessage, blame: 'configuration' });
}
