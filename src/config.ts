import path from 'node:path';
import { z } from 'zod';
import { agentSettings } from './config-agent-settings.js';
import { boolean, checkedList, commaList, integer, postgresUrl } from './config-values.js';
import { isSecretVariable, renamedVariablesIn } from './config-variables.js';
import { isOrigin } from './http/cors.js';
import { jsonSyntaxProblem } from './json-limits.js';
import { type Catalogue, catalogueSchema } from './llm/catalogue.js';
import { modelSettingProblems } from './llm/model-settings.js';
import { SDK_LOG_LEVELS } from './llm/sdk-logger.js';
import { RATE_LIMIT_MAX_BOUND } from './tenancy/types.js';

/**
 * Every setting of the service, read from the environment through this one
 * schema (the agents' own are in config-agent-settings.ts). `loadConfig`
 * reports every problem at once, one line per variable, so an operator
 * fixes a broken deployment in one round.
 */
export const configSchema = z.object({
  PORT: integer(0, 65_535).default(8080).describe('TCP port the HTTP server listens on.'),
  HOST: z.string().trim().min(1).default('127.0.0.1').describe('Interface to listen on.'),
  DATABASE_URL: postgresUrl
    .optional()
    .describe('Postgres connection URL. Unset: an embedded PostgreSQL in WAYMARK_DATA_DIR.'),
  DATABASE_LISTEN_URL: postgresUrl
    .optional()
    .describe(
      'Direct URL for the one LISTEN connection per replica, when DATABASE_URL goes through a transaction pooler.',
    ),
  DATABASE_POOL_MAX: integer(1, 1000).default(10).describe('Connections in the pool.'),
  DATABASE_PREPARED_STATEMENTS: z
    .enum(['auto', 'on', 'off'])
    .default('auto')
    .describe(
      'Run statements as named prepared statements (PostgreSQL skips parsing and planning them again). auto: on with the embedded PostgreSQL, off with DATABASE_URL, which may go through a transaction-mode pooler; turn on when it does not (or it is PgBouncer 1.21+ with max_prepared_statements).',
    ),
  WAYMARK_DATA_DIR: z
    .string()
    .trim()
    .min(1)
    .default('.waymark')
    .transform((dir) => path.resolve(dir))
    .describe('Folder for embedded Postgres data and the bootstrap `admin-key` file.'),
  WAYMARK_EMBEDDED_PG_PORT: integer(0, 65_535)
    .default(0)
    .describe('Port of the embedded PostgreSQL on 127.0.0.1; 0 picks a free one.'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      message: 'expected one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info')
    .describe('pino log level.'),
  SHUTDOWN_GRACE_MS: integer(0, 600_000)
    .default(10_000)
    .describe('How long SIGTERM/SIGINT waits for in-flight requests before closing them.'),
  BODY_LIMIT_BYTES: integer(1024, 100 * 1024 * 1024)
    .default(1024 * 1024)
    .describe('Largest accepted request body; larger ones get 413.'),
  REQUEST_TIMEOUT_MS: integer(1000, 3_600_000)
    .default(60_000)
    .describe(
      'Time a client has to send a whole request, headers and body; past it the request gets 408 and its connection is closed. The response is not limited: an event stream stays open. Raise it with BODY_LIMIT_BYTES for large bodies over slow links.',
    ),
  RATE_LIMIT_MAX: integer(1, RATE_LIMIT_MAX_BOUND)
    .default(600)
    .describe(
      'Requests one tenant may make per window, over every replica, all its API keys and stream tokens together, unless the tenant has a limit of its own (`rateLimit`).',
    ),
  RATE_LIMIT_WINDOW_MS: integer(1000, 3_600_000)
    .default(60_000)
    .describe('Length of the rate-limit window.'),
  RATE_LIMIT_SYNC_MS: integer(0, 60_000)
    .default(1000)
    .describe(
      'How often a replica adds the requests it let through to the counts the replicas share in PostgreSQL and reads back their sums, so that a tenant’s limit holds over all of them. 0: each replica counts alone, and a tenant gets up to the limit from each.',
    ),
  AUTH_CACHE_TTL_MS: integer(0, 86_400_000)
    .default(60_000)
    .describe(
      'How long a replica serves an API key’s tenant and scopes from memory instead of a query. Revocations and tenant changes reach every replica at once by NOTIFY; this bounds staleness should one be lost. 0: no cache.',
    ),
  AUTH_FAILURE_LIMIT: integer(0, 1_000_000)
    .default(100)
    .describe(
      'Unknown or revoked API keys one client address may send per AUTH_FAILURE_WINDOW_MS, per replica (an IPv6 client counted by its /64); past it, its requests with a key this replica has not found active before get 429 auth_failures_exceeded, without a query, until the window ends. 0: no bound.',
    ),
  AUTH_FAILURE_WINDOW_MS: integer(1000, 3_600_000)
    .default(60_000)
    .describe('Length of the window AUTH_FAILURE_LIMIT counts in.'),
  USAGE_REPORT_TIMEOUT_MS: integer(100, 600_000)
    .default(10_000)
    .describe(
      'Longest a usage report (GET /v1/usage, GET /v1/tenants/:id/usage) may take in PostgreSQL; past it the request gets 503 usage_report_timeout, so that a tenant with many calls in a long range does not hold a pooled connection for long.',
    ),
  OPENAI_API_KEY: z
    .string()
    .trim()
    .min(1)
    .optional()
    .describe('OpenAI key; enables the default OpenAI models.'),
  OPENAI_BASE_URL: z
    .url()
    .optional()
    .describe(
      'Base URL of the OpenAI provider (any OpenAI-compatible server: Ollama, vLLM, OpenRouter); set without OPENAI_API_KEY, a server that needs no key, it enables the default OpenAI models too.',
    ),
  OPENAI_LOG: z
    .enum(SDK_LOG_LEVELS)
    .optional()
    .describe(
      "Level of the OpenAI SDK's own log lines (off, error, warn, info, debug), whatever LOG_LEVEL is; unset: its warnings, as LOG_LEVEL allows.",
    ),
  ANTHROPIC_API_KEY: z
    .string()
    .trim()
    .min(1)
    .optional()
    .describe('Anthropic key; enables the default Claude models.'),
  ANTHROPIC_BASE_URL: z
    .url()
    .optional()
    .describe(
      'Base URL of the Anthropic provider; set without ANTHROPIC_API_KEY, a server that needs no key, it enables the default Claude models too.',
    ),
  ANTHROPIC_LOG: z
    .enum(SDK_LOG_LEVELS)
    .optional()
    .describe(
      "Level of the Anthropic SDK's own log lines (off, error, warn, info, debug), whatever LOG_LEVEL is; unset: its warnings, as LOG_LEVEL allows.",
    ),
  WAYMARK_MODELS: z
    .string()
    .transform((text, context): Catalogue => {
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch (error) {
        context.addIssue({
          code: 'custom',
          message: `not valid JSON: ${jsonSyntaxProblem(error)}`,
        });
        return z.NEVER;
      }
      const parsed = catalogueSchema.safeParse(json);
      if (parsed.success) return parsed.data;
      for (const issue of parsed.error.issues) {
        context.addIssue({
          code: 'custom',
          message: `${issue.path.join('.') || '(root)'}: ${issue.message}`,
        });
      }
      return z.NEVER;
    })
    .optional()
    .describe(
      'The model catalogue as JSON (providers, models, defaultModel); unset: derived from the keys and base URLs present.',
    ),
  WAYMARK_DEFAULT_MODEL: z
    .string()
    .trim()
    .min(1)
    .optional()
    .describe('Catalogue name of the system default model.'),
  LLM_MAX_TOTAL_ATTEMPTS: integer(1, 20)
    .default(4)
    .describe('Model call attempts per turn across the whole fallback chain.'),
  LLM_MAX_RETRIES_PER_MODEL: integer(0, 10)
    .default(2)
    .describe('Retries of one model before falling through to the next.'),
  LLM_BACKOFF_BASE_MS: integer(1, 60_000)
    .default(500)
    .describe('First retry waits up to this long.'),
  LLM_BACKOFF_MAX_MS: integer(1, 600_000)
    .default(8000)
    .describe('Ceiling of the exponential backoff.'),
  LLM_MAX_RETRY_AFTER_MS: integer(0, 600_000)
    .default(10_000)
    .describe('A provider asking to wait longer than this is fallen through at once.'),
  LLM_ATTEMPT_TIMEOUT_MS: integer(100, 600_000)
    .default(60_000)
    .describe(
      'Time an attempt may take from its request to the start of its answer: its first streamed content of any kind (text, or the start of a tool call).',
    ),
  LLM_STREAM_MAX_MS: integer(1000, 3_600_000)
    .default(600_000)
    .describe(
      'Time an attempt may take from its request to the end of its stream; past it the call fails as a timeout.',
    ),
  LLM_IDLE_TIMEOUT_MS: integer(100, 600_000)
    .default(30_000)
    .describe('A stream with no chunk for this long is aborted as a timeout.'),
  LLM_BREAKER_THRESHOLD: integer(1, 1000)
    .default(5)
    .describe('Consecutive failures that open a provider’s circuit.'),
  LLM_BREAKER_PROBE_MS: integer(100, 3_600_000)
    .default(30_000)
    .describe('How often an open circuit probes its provider.'),
  WORKFLOW_RETENTION_DAYS: integer(0, 36_500)
    .default(30)
    .describe(
      'Finished workflows and their events are deleted this many days after they finish; 0 keeps them forever.',
    ),
  USAGE_LEDGER_RETENTION_DAYS: integer(0, 36_500)
    .default(0)
    .describe(
      'Usage ledger rows (llm_calls, one per model call attempt) are deleted this many days after their call started; 0 keeps them forever.',
    ),
  REVOKED_KEY_RETENTION_DAYS: integer(0, 36_500)
    .default(90)
    .describe(
      'Revoked or expired API keys are deleted this many days after their revocation or expiry, whichever came first (until then GET /v1/api-keys lists them); 0 keeps them forever.',
    ),
  PAUSED_WORKFLOW_EXPIRY_DAYS: integer(0, 36_500)
    .default(0)
    .describe(
      'Workflows waiting for input (an answer or a review) this many days after they paused are cancelled by the retention sweep, with the error input_expired; 0 lets them wait forever.',
    ),
  RETENTION_SWEEP_INTERVAL_MS: integer(1000, 7 * 86_400_000)
    .default(3_600_000)
    .describe(
      'How often each replica sweeps for workflows, usage ledger rows and revoked API keys past their retention, and paused workflows past their expiry.',
    ),
  WORKFLOW_LEASE_MS: integer(1000, 3_600_000)
    .default(30_000)
    .describe(
      'How long a replica holds a running workflow without renewing its lease; a crashed replica’s workflows are taken over this long after its last renewal.',
    ),
  WORKFLOW_LEASE_RENEW_MS: integer(100, 3_600_000)
    .default(10_000)
    .describe(
      'How often a replica renews the leases of the workflows it runs; keep it well under WORKFLOW_LEASE_MS.',
    ),
  WORKFLOW_MAX_TAKEOVERS: integer(1, 1000)
    .default(3)
    .describe(
      'Times in a row a workflow may be taken over (its runner crashed, stalled, lost its database or shut down) with nothing completed in between (no turn, stage or plan); the next takeover fails it with too_many_takeovers instead of resuming it, so a run that kills its replicas is not passed on forever.',
    ),
  LEASE_RECLAIM_INTERVAL_MS: integer(100, 3_600_000)
    .default(2000)
    .describe(
      'How often each replica looks for workflows whose lease expired or was handed over at a shutdown, and resumes them.',
    ),
  SSE_HEARTBEAT_MS: integer(10, 3_600_000)
    .default(15_000)
    .describe(
      'An event stream with nothing to send writes a comment this often, so proxies keep it open.',
    ),
  SSE_RETRY_MS: integer(0, 3_600_000)
    .default(2000)
    .describe('Reconnection delay an event stream tells its client (the SSE `retry:` field).'),
  SSE_MAX_BUFFERED_EVENTS: integer(1, 1_000_000)
    .default(1000)
    .describe(
      'Frames an event stream may hold for a client that does not read; past it the client is dropped and resumes with Last-Event-ID.',
    ),
  STREAM_TOKEN_TTL_SECONDS: integer(1, 86_400)
    .default(300)
    .describe('Lifetime of the signed stream tokens browsers put in `?token=` of an events URL.'),
  TRUST_PROXY: boolean
    .default(false)
    .describe('Trust X-Forwarded-* headers (set behind a load balancer).'),
  CORS_ALLOWED_ORIGINS: checkedList(
    commaList,
    isOrigin,
    'an origin such as https://app.example.com, or *',
  ).describe(
    'Origins whose browser pages may call the API (CORS), comma-separated, each scheme://host[:port]; * allows any. Empty: no CORS.',
  ),
  ...agentSettings,
});

export type Config = z.infer<typeof configSchema>;

/** Names of every variable the service reads; the deployment files are checked against it. */
export const configVariables = Object.keys(configSchema.shape) as (keyof Config)[];

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((line) => `  ${line}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Reads the configuration from an environment. An empty string counts as
 * unset, so `PORT=` in a compose file falls back to the default. The
 * settings checked against the model catalogue (the default and classifier
 * models, each provider's key variable) are reported with the others.
 */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const input: Record<string, string> = {};
  for (const name of configVariables) {
    const value = env[name];
    if (value !== undefined && value.trim() !== '') input[name] = value;
  }
  const parsed = configSchema.safeParse(input);
  const problems = [
    ...renamedVariablesIn(env),
    ...(parsed.success
      ? crossCheckProblems(parsed.data)
      : parsed.error.issues.map((issue) => {
          const name = String(issue.path[0] ?? '(environment)');
          const given = input[name];
          const shown = given === undefined || isSecretVariable(name) ? '' : ` (got "${given}")`;
          return `${name}: ${issue.message}${shown}`;
        })),
    ...catalogueProblems(input, env),
  ];
  if (problems.length > 0 || !parsed.success) throw new ConfigError(problems);
  return parsed.data;
}

function crossCheckProblems(config: Config): string[] {
  // A lease renewed no sooner than it expires is taken over while its runner is healthy.
  return config.WORKFLOW_LEASE_RENEW_MS >= config.WORKFLOW_LEASE_MS
    ? [`WORKFLOW_LEASE_RENEW_MS: must be less than WORKFLOW_LEASE_MS (${config.WORKFLOW_LEASE_MS})`]
    : [];
}

const modelSettingsSchema = configSchema.pick({
  OPENAI_API_KEY: true,
  OPENAI_BASE_URL: true,
  ANTHROPIC_API_KEY: true,
  ANTHROPIC_BASE_URL: true,
  WAYMARK_MODELS: true,
  WAYMARK_DEFAULT_MODEL: true,
  CLASSIFY_WITH_MODEL: true,
  CLASSIFY_MODEL: true,
});

/**
 * The model settings checked against the catalogue, even when an unrelated
 * variable is wrong; not when one of them is, which its own line reports.
 */
function catalogueProblems(input: Record<string, string>, env: NodeJS.ProcessEnv): string[] {
  const settings = modelSettingsSchema.safeParse(input);
  return settings.success ? modelSettingProblems(settings.data, env) : [];
}
