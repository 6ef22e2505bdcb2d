import { z } from 'zod';
import { boolean, checkedList, decimal, integer } from './config-values.js';
import { DEFAULT_COMPLEX_KEYWORDS, parseKeywordList } from './orchestrator/classify-keywords.js';
import { isHostPattern, parseHostPatterns } from './tools/host-allowlist.js';
import { BUDGET_LIMITS } from './workflows/budget.js';

const hostPatterns = checkedList(
  parseHostPatterns,
  isHostPattern,
  'a host name, a *.domain wildcard or an IP',
);

/**
 * The settings of what the agents do (config.ts has the service's own):
 * classification, the pipeline, sessions' history, tools and budgets. Part
 * of the one configuration schema, `configSchema`, which spreads them in.
 */
export const agentSettings = {
  CLASSIFY_COMPLEX_KEYWORDS: z
    .string()
    .transform(parseKeywordList)
    .pipe(z.array(z.string()).min(1, 'expected at least one keyword, comma-separated'))
    .optional()
    .describe(
      `Words and phrases that make a question complex, comma-separated, matched as whole words, case-insensitively, a space or hyphen matching either; replaces the default list (${DEFAULT_COMPLEX_KEYWORDS.join(', ')}).`,
    ),
  CLASSIFY_WITH_MODEL: boolean
    .default(false)
    .describe(
      'After the keywords, ask a cheap model whether a question is simple or complex; its answer decides, the keywords remain the fallback.',
    ),
  CLASSIFY_MODEL: z
    .string()
    .trim()
    .min(1)
    .optional()
    .describe(
      'Catalogue name of the model asked when CLASSIFY_WITH_MODEL is on; unset: the system default model.',
    ),
  PIPELINE_MAX_STAGES: integer(1, 500)
    .default(12)
    .describe(
      'Most stages a plan may have; a longer plan is invalid and the planner is asked once to repair it.',
    ),
  PIPELINE_STAGE_RETRIES: integer(0, 10)
    .default(2)
    .describe(
      'Automatic re-runs of a stage whose result fails validation, each told what failed; then the workflow pauses (stage_failed).',
    ),
  PIPELINE_STAGE_RESULT_MAX_CHARS: integer(200, 1_000_000)
    .default(8000)
    .describe('Each earlier stage result quoted in a stage prompt is cut to this many characters.'),
  PIPELINE_SYNTHESIS_RESULT_MAX_CHARS: integer(200, 1_000_000)
    .default(16_000)
    .describe(
      'Each stage result quoted in the final synthesis prompt is cut to this many characters.',
    ),
  SESSION_HISTORY_MAX_TOKENS: integer(0, 10_000_000)
    .default(8000)
    .describe(
      'Estimated tokens of session history a workflow sees before its input (at most a quarter of its model’s context window); the oldest question-and-answer pairs are dropped first.',
    ),
  SESSION_HISTORY_FLOOR_TURNS: integer(0, 1000)
    .default(2)
    .describe(
      'The latest question-and-answer pairs of a session a workflow always sees, even over SESSION_HISTORY_MAX_TOKENS.',
    ),
  HTTP_TOOLS_ALLOWED_HOSTS: hostPatterns.describe(
    'Hosts HTTP tools may call, comma-separated; `*.example.com` matches its subdomains. Empty: every public host.',
  ),
  HTTP_TOOLS_ALLOW_PRIVATE: boolean
    .default(false)
    .describe(
      'Let HTTP tools call loopback and private addresses (a tool server beside the service).',
    ),
  MCP_TOOLS_CACHE_MS: integer(0, 86_400_000)
    .default(0)
    .describe(
      'How long a run reuses the tools an MCP server listed for an earlier run on this replica, connecting to the server only when the model calls one of them; 0: every run connects to each server and lists its tools before its first model call.',
    ),
  HTTP_TOOLS_MAX_PER_TENANT: integer(1, 10_000)
    .default(64)
    .describe(
      'HTTP tools one tenant may register; one more is refused (409 tool_limit_reached) until one is deleted. Every workflow offers the model all of them, and model APIs refuse requests with too many tools (OpenAI: 128).',
    ),
  MCP_SERVERS_MAX_PER_TENANT: integer(1, 10_000)
    .default(16)
    .describe(
      'MCP servers one tenant may register; one more is refused (409 mcp_server_limit_reached) until one is deleted. It does not cap the tools each server lists.',
    ),
  TOOLS_MAX_OFFERED: integer(1, 10_000)
    .default(128)
    .describe(
      'Tools one workflow offers the model: its built-ins, then the tenant’s HTTP tools, then its MCP servers’ tools (narrowed to the request’s `tools` when it names some). Those past it are left out of the run with a tools_over_limit warning naming them: OpenAI refuses a request with more than 128.',
    ),
  HTTP_FETCH_ALLOWED_HOSTS: hostPatterns.describe(
    'Hosts the built-in http_fetch tool may fetch, comma-separated; `*.example.com` matches its subdomains. Empty: the tool is not offered.',
  ),
  HTTP_FETCH_MAX_BYTES: integer(1024, 100 * 1024 * 1024)
    .default(1024 * 1024)
    .describe('Bytes of a response body http_fetch reads; the rest is cut with a note.'),
  HTTP_FETCH_TIMEOUT_MS: integer(100, 600_000)
    .default(15_000)
    .describe('Time one http_fetch call may take, redirects and body included.'),
  BUDGET_MAX_ITERATIONS: integer(1, BUDGET_LIMITS.maxIterations)
    .default(10)
    .describe(
      'Default cap on a workflow’s model turns with tools; at the cap one last turn without tools gives a best-effort answer. Tenants may override it; a request may lower it.',
    ),
  BUDGET_MAX_TOKENS: integer(1, BUDGET_LIMITS.maxTokens)
    .optional()
    .describe(
      'Default cap on the input plus output tokens of a workflow’s model turns, checked before each turn; reaching it ends with one last turn without tools. Unset: uncapped. Tenants may override it; a request may lower it.',
    ),
  BUDGET_MAX_COST_USD: decimal(BUDGET_LIMITS.maxCostUsd)
    .optional()
    .describe(
      'Default cap on what a workflow’s model turns cost in US dollars at the catalogue’s prices, checked before each turn like BUDGET_MAX_TOKENS. Unset: uncapped. Tenants may override it; a request may lower it.',
    ),
  TOOL_OUTPUT_MAX_CHARS: integer(1000, 10_000_000)
    .default(20_000)
    .describe(
      'Characters of one tool result put into the prompt; longer ones keep their head and tail with a note.',
    ),
  TOOL_CALLS_MAX_PER_TURN: integer(1, 1000)
    .default(16)
    .describe(
      'Tool calls one model turn may make; those past it are not run, each answered with an error telling the model to make at most this many per turn, and the turn gets a tool_call_cap warning.',
    ),
  TOOL_CALLS_CONCURRENCY: integer(1, 1000)
    .default(8)
    .describe(
      'Parallel tool calls of one turn running at once; the others start as earlier ones end. Sequential tools still run one at a time after them.',
    ),
};
