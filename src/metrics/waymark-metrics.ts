import type { ProbeRecord } from '../llm/router/router.js';
import type { AttemptRecord } from '../llm/router/types.js';
import type { SweepCounts } from '../workflows/retention.js';
import type { WorkflowEvent } from '../workflows/types.js';
import { createMetricsRegistry } from './registry.js';

/**
 * What `GET /metrics` exposes (README, Metrics). Every label takes a
 * bounded set of values: HTTP routes are route patterns (`unmatched` for a
 * path no route serves), models and providers come from the catalogue,
 * statuses and outcomes from closed unions. No tenant, workflow, tool name
 * (tenants name their own tools) or error message is a label.
 *
 * Counts are this replica's: workflow events count on the replica that
 * committed them, so a fleet's totals are the sum over its replicas.
 */
export function createWaymarkMetrics(options: {
  /** Workflow runs in progress on this replica, read at each scrape. */
  runsInProgress: () => number;
  /** The database pool's connections, read at each scrape (pg.Pool's counts). */
  pool?: () => { totalCount: number; idleCount: number; waitingCount: number };
  /** Each catalogue provider's circuit breaker, open or not, read at each scrape. */
  providerBreakers?: () => Array<{ provider: string; open: boolean }>;
}) {
  const registry = createMetricsRegistry();
  const httpRequests = registry.counter({
    name: 'waymark_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code.',
    labelNames: ['method', 'route', 'status'],
  });
  const httpDuration = registry.histogram({
    name: 'waymark_http_request_duration_seconds',
    help: 'Time to answer an HTTP request (an event stream: until it ends), by method and route pattern.',
    labelNames: ['method', 'route'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  });
  const workflowsStarted = registry.counter({
    name: 'waymark_workflows_started_total',
    help: 'Workflows that started running (their workflow_start event).',
    labelNames: [],
  });
  const workflowsFinished = registry.counter({
    name: 'waymark_workflows_finished_total',
    help: 'Workflows that ended, by status: completed, failed or cancelled.',
    labelNames: ['status'],
  });
  const workflowPauses = registry.counter({
    name: 'waymark_workflow_pauses_total',
    help: 'Workflows that paused for input, by reason: checkpoint, clarification, tool_approval, stage_failed or synthesis_failed.',
    labelNames: ['reason'],
  });
  registry.gauge({
    name: 'waymark_workflow_runs_in_progress',
    help: 'Workflow runs in progress on this replica.',
    labelNames: [],
    collect: () => [[{}, options.runsInProgress()]],
  });
  const takeovers = registry.counter({
    name: 'waymark_workflow_takeovers_total',
    help: 'Workflows this replica’s lease sweep took over from a runner that was gone (crashed, stalled or shut down).',
    labelNames: [],
  });
  const takeoversExhausted = registry.counter({
    name: 'waymark_workflow_takeovers_exhausted_total',
    help: 'Workflows failed with too_many_takeovers (taken over more than WORKFLOW_MAX_TAKEOVERS times in a row without progress); also in waymark_workflows_finished_total{status="failed"}.',
    labelNames: [],
  });
  const stageAttempts = registry.counter({
    name: 'waymark_pipeline_stage_attempts_total',
    help: 'Pipeline stage attempts that ended, by status: completed or failed.',
    labelNames: ['status'],
  });
  const toolCalls = registry.counter({
    name: 'waymark_tool_calls_total',
    help: 'Tool calls that ended, by status: completed or failed.',
    labelNames: ['status'],
  });
  const llmCalls = registry.counter({
    name: 'waymark_llm_calls_total',
    help: 'Model call attempts (each retry and fallback is one), by provider, model and outcome: ok or the error kind.',
    labelNames: ['provider', 'model', 'outcome'],
  });
  const llmTokens = registry.counter({
    name: 'waymark_llm_tokens_total',
    help: 'Tokens of model call attempts, by provider, model and kind: input (cached included), cached_input or output.',
    labelNames: ['provider', 'model', 'kind'],
  });
  const llmCost = registry.counter({
    name: 'waymark_llm_cost_usd_total',
    help: 'Cost of model call attempts in US dollars, at the catalogue prices, by provider and model.',
    labelNames: ['provider', 'model'],
  });
  const llmDuration = registry.histogram({
    name: 'waymark_llm_call_duration_seconds',
    help: 'Duration of model call attempts, by provider and model.',
    labelNames: ['provider', 'model'],
    buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
  });
  const breakerProbes = registry.counter({
    name: 'waymark_llm_breaker_probes_total',
    help: 'Probes this replica made of a provider whose circuit breaker is open (a one-token call to its first catalogue model, in no usage ledger), by provider and outcome: ok (the breaker closes) or failed.',
    labelNames: ['provider', 'outcome'],
  });
  const providerBreakers = options.providerBreakers;
  if (providerBreakers) {
    registry.gauge({
      name: 'waymark_llm_breaker_open',
      help: 'Whether this replica’s circuit breaker for a provider is open (1: the router skips it and probes it) or closed (0), by provider.',
      labelNames: ['provider'],
      collect: () => providerBreakers().map(({ provider, open }) => [{ provider }, open ? 1 : 0]),
    });
  }
  const retentionDeleted = registry.counter({
    name: 'waymark_retention_deleted_total',
    help: 'Rows this replica’s retention sweep deleted, by kind: workflows (finished, past WORKFLOW_RETENTION_DAYS), llm_calls (past USAGE_LEDGER_RETENTION_DAYS) or api_keys (revoked or expired, past REVOKED_KEY_RETENTION_DAYS).',
    labelNames: ['kind'],
  });
  const pausedExpired = registry.counter({
    name: 'waymark_paused_workflows_expired_total',
    help: 'Paused workflows this replica’s retention sweep cancelled (input_expired) for waiting past PAUSED_WORKFLOW_EXPIRY_DAYS; also in waymark_workflows_finished_total{status="cancelled"}.',
    labelNames: [],
  });
  const pool = options.pool;
  if (pool) {
    registry.gauge({
      name: 'waymark_db_pool_connections',
      help: 'Connections of this replica’s database pool, by state: idle or in_use.',
      labelNames: ['state'],
      collect: () => {
        const counts = pool();
        return [
          [{ state: 'idle' }, counts.idleCount],
          [{ state: 'in_use' }, counts.totalCount - counts.idleCount],
        ];
      },
    });
    registry.gauge({
      name: 'waymark_db_pool_waiting',
      help: 'Queries of this replica waiting for a free pool connection (DATABASE_POOL_MAX reached).',
      labelNames: [],
      collect: () => [[{}, pool().waitingCount]],
    });
  }
  registry.gauge({
    name: 'process_resident_memory_bytes',
    help: 'Resident memory of this replica’s process, in bytes.',
    labelNames: [],
    collect: () => [[{}, process.memoryUsage.rss()]],
  });
  registry.gauge({
    name: 'nodejs_heap_size_used_bytes',
    help: 'JavaScript heap in use, in bytes.',
    labelNames: [],
    collect: () => [[{}, process.memoryUsage().heapUsed]],
  });
  const sseOpen = registry.gauge({
    name: 'waymark_sse_streams_open',
    help: 'Workflow event streams open on this replica.',
    labelNames: [],
  });
  const keyLookups = registry.counter({
    name: 'waymark_api_key_lookups_total',
    help: 'API keys not in this replica’s memory, by result: found (active), unknown (unknown or revoked), refused (not read: the client address had spent AUTH_FAILURE_LIMIT).',
    labelNames: ['result'],
  });
  const rateLimitSyncs = registry.counter({
    name: 'waymark_rate_limit_syncs_total',
    help: 'Times this replica added its rate-limit counts to the shared ones (RATE_LIMIT_SYNC_MS), by result: ok, failed (it counted alone meanwhile).',
    labelNames: ['result'],
  });
  const sseOpened = registry.counter({
    name: 'waymark_sse_streams_opened_total',
    help: 'Workflow event streams opened on this replica.',
    labelNames: [],
  });

  return {
    render: registry.render,

    /** One answered request; `route` is its pattern, undefined when no route matched. */
    observeRequest(request: {
      method: string;
      route: string | undefined;
      status: number;
      seconds: number;
    }): void {
      const method = KNOWN_METHODS.has(request.method) ? request.method : 'OTHER';
      const route = request.route ?? 'unmatched';
      httpRequests.inc({ method, route, status: String(request.status) });
      httpDuration.observe({ method, route }, request.seconds);
    },

    /** Events committed on this replica (the event hub's `publish`). */
    observeEvents(events: readonly WorkflowEvent[]): void {
      for (const event of events) {
        switch (event.type) {
          case 'workflow_start':
            workflowsStarted.inc({});
            break;
          case 'workflow_end':
            workflowsFinished.inc({ status: event.status });
            if (errorCodeOf(event) === 'too_many_takeovers') takeoversExhausted.inc({});
            break;
          case 'checkpoint':
            workflowPauses.inc({ reason: 'checkpoint' });
            break;
          case 'clarification_request':
            workflowPauses.inc({ reason: 'clarification' });
            break;
          case 'tool_approval_request':
            workflowPauses.inc({ reason: 'tool_approval' });
            break;
          case 'synthesis_failed':
            workflowPauses.inc({ reason: 'synthesis_failed' });
            break;
          case 'stage':
            if (event.status === 'paused') workflowPauses.inc({ reason: 'stage_failed' });
            else if (isEnd(event.status)) stageAttempts.inc({ status: event.status });
            break;
          case 'tool_call':
            if (isEnd(event.status)) toolCalls.inc({ status: event.status });
            break;
          default:
            break;
        }
      }
    },

    /** One probe of a provider whose breaker is open. */
    observeProbe(probe: ProbeRecord): void {
      breakerProbes.inc({ provider: probe.provider, outcome: probe.outcome });
    },

    /** One model call attempt, as the usage ledger records it. */
    observeAttempt(attempt: AttemptRecord): void {
      const { provider, model, usage } = attempt;
      llmCalls.inc({ provider, model, outcome: attempt.outcome });
      llmTokens.inc({ provider, model, kind: 'input' }, usage.inputTokens);
      llmTokens.inc({ provider, model, kind: 'cached_input' }, usage.cachedInputTokens);
      llmTokens.inc({ provider, model, kind: 'output' }, usage.outputTokens);
      llmCost.inc({ provider, model }, attempt.costUsd);
      llmDuration.observe({ provider, model }, attempt.latencyMs / 1000);
    },

    /** Workflows this replica's lease sweep took over. */
    observeTakeovers(count: number): void {
      takeovers.inc({}, count);
    },

    /** What one retention sweep on this replica did (also one that stopped on an error: what it did first). */
    observeSweep(counts: SweepCounts): void {
      retentionDeleted.inc({ kind: 'workflows' }, counts.workflows);
      retentionDeleted.inc({ kind: 'llm_calls' }, counts.llmCalls);
      retentionDeleted.inc({ kind: 'api_keys' }, counts.apiKeys);
      pausedExpired.inc({}, counts.expired);
    },

    /** One API key that was not in memory: read (found or not), or refused without a read. */
    observeKeyLookup(result: 'found' | 'unknown' | 'refused'): void {
      keyLookups.inc({ result });
    },

    observeRateLimitSync(result: 'ok' | 'failed'): void {
      rateLimitSyncs.inc({ result });
    },

    /** An event stream opened; call the returned function once it ends. */
    streamOpened(): () => void {
      sseOpened.inc({});
      sseOpen.inc({});
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        sseOpen.dec({});
      };
    },
  };
}

export type WaymarkMetrics = ReturnType<typeof createWaymarkMetrics>;

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** A `workflow_end`'s error code (tracker.end writes it as `detail.error`), if it has one. */
function errorCodeOf(event: WorkflowEvent): unknown {
  const error = event.detail.error;
  return typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined;
}

function isEnd(status: string): status is 'completed' | 'failed' {
  return status === 'completed' || status === 'failed';
}
