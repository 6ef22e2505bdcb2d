import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { Config } from './config.js';
import { createLlm, type Llm } from './llm/create-llm.js';
import { createUsageReports, type UsageReports } from './llm/usage-reports.js';
import { createWaymarkMetrics, type WaymarkMetrics } from './metrics/waymark-metrics.js';
import { classifierSettings } from './orchestrator/classify.js';
import { createExecutions, type Executions } from './orchestrator/executions.js';
import { createExecutor } from './orchestrator/executor.js';
import { createLeaseReclaimer, type LeaseReclaimer } from './orchestrator/lease-reclaimer.js';
import { createPipelineReviews, type PipelineReviews } from './orchestrator/pipeline/review.js';
import type { PipelineSettings } from './orchestrator/pipeline/run-pipeline.js';
import { turnCost } from './orchestrator/tool-loop/budget.js';
import { createSessionService, type SessionService } from './sessions/service.js';
import { type DatabaseHandle, openDatabase } from './store/database.js';
import type { Migration } from './store/migrate.js';
import { listTenantEndpoints } from './store/tenant-endpoints.js';
import { createWorkflowInsertBatches } from './store/workflow-insert-batches.js';
import { workflowsRepository } from './store/workflows.js';
import { createPrincipalCache, type PrincipalCache } from './tenancy/principal-cache.js';
import { createRateLimitCounts, type RateLimitCounts } from './tenancy/rate-limit-counts.js';
import { createTenancyService, type TenancyService } from './tenancy/service.js';
import { createHttpToolsService, type HttpToolsService } from './tools/http-tools-service.js';
import { createMcpServersService, type McpServersService } from './tools/mcp-servers-service.js';
import { createMcpToolLists } from './tools/mcp-tool-lists.js';
import { builtinTools } from './tools/registry.js';
import { createToolNameCheck } from './tools/tool-names.js';
import { createEventHub, type EventHub } from './tracker/event-hub.js';
import { configuredBudget } from './workflows/budget.js';
import { createEndpointsMemory } from './workflows/early-start.js';
import { createRetentionSweeper, type RetentionSweeper } from './workflows/retention.js';
import { createWorkflowService, type WorkflowService } from './workflows/service.js';
import { createReplicaTransitionBatches } from './workflows/transitions.js';

/**
 * Everything the HTTP app needs, built once per process in main.ts (and per
 * test). Passed explicitly: no module holds mutable state.
 */
export interface Services {
  config: Config;
  log: Logger;
  database: DatabaseHandle;
  /** The migrations this build knows; /readyz compares them with the database. */
  migrations: Migration[];
  /**
   * Whether the process has finished starting: /readyz answers 503
   * `starting` until then. main.ts completes it once it listens and has
   * announced the bootstrap key, so a script that waits for readiness finds
   * the key saved; services built without `holdReadiness` start complete.
   */
  startup: StartupGate;
  tenancy: TenancyService;
  /** Principals of recently used API keys; the hub invalidates them. */
  principalCache: PrincipalCache;
  /** Model catalogue, router and usage ledger. */
  llm: Llm;
  /** This process's id among the replicas (lease owner, NOTIFY origin). */
  replicaId: string;
  /** Workflow event fan-out; `start()` opens its LISTEN connection. */
  hub: EventHub;
  /** Create, read, list, answer and cancel workflows. */
  workflows: WorkflowService;
  /** Continue, modify or retry a paused pipeline; its plan and stages. */
  reviews: PipelineReviews;
  /** Sessions: conversations whose history later workflows see. */
  sessions: SessionService;
  /** What a tenant's model calls used and cost over a time range, from the usage ledger. */
  usageReports: UsageReports;
  /** Tenants' HTTP tools: registration, listing, and their `Tool`s for a workflow. */
  httpTools: HttpToolsService;
  /** Tenants' MCP servers: registration, listing, and their connected `Tool`s for one run. */
  mcpServers: McpServersService;
  /** The workflow runs on this replica; `drain` at shutdown. */
  executions: Executions;
  /** Removes finished workflows past the retention age; `start()` in main.ts. */
  retention: RetentionSweeper;
  /** Takes over workflows whose runner is gone; `start()` in main.ts, stopped first at shutdown. */
  reclaimer: LeaseReclaimer;
  /** The rate limit's counts per tenant and API key, shared with the other replicas (tenancy/rate-limit-counts.ts). */
  rateLimitCounts: RateLimitCounts;
  /** This replica's counters and gauges, served by `GET /metrics`. */
  metrics: WaymarkMetrics;
}

/** Builds the services over a database URL. Opens no connection until the first query. */
export function createServices(options: {
  config: Config;
  log: Logger;
  databaseUrl: string;
  migrations: Migration[];
  /** Where catalogue providers' named key variables are read; the process environment in main.ts. */
  env?: NodeJS.ProcessEnv;
  /** /readyz answers `starting` until `startup.complete()` (main.ts). */
  holdReadiness?: boolean;
}): Services {
  // This replica's connections, told from every other client's by the event hub.
  const connectionName = `waymark-${randomBytes(6).toString('hex')}`;
  const database = openDatabase({
    url: options.databaseUrl,
    poolMax: options.config.DATABASE_POOL_MAX,
    log: options.log,
    preparedStatements: usesPreparedStatements(options.config),
    applicationName: connectionName,
  });
  const replicaId = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  // Group commit (store/statement-batches.ts): two statements of each kind
  // in flight at once, each of at most 64 writes or ~1 MB of their text.
  // bench/simple-path at 32 (2026-12-01, alternated runs, transitions
  // batched) made 323-396 workflows/s with two, 336-385 with one, 283-343
  // with three and 287-314 with five, the fewer the larger the batches
  // (inserts batched too: 343-361 with two, 368-377 with one); two, so
  // that one batch waiting on a row lock does not hold up every run on the
  // replica.
  const batchLimits = {
    maxInFlight: Math.min(2, options.config.DATABASE_POOL_MAX),
    maxItems: 64,
    maxChars: 1_000_000,
  };
  const principalCache = createPrincipalCache({ ttlMs: options.config.AUTH_CACHE_TTL_MS });
  const executions = createExecutions({ log: options.log });
  const metrics = createWaymarkMetrics({
    runsInProgress: executions.size,
    pool: () => database.pool,
    // Read at a scrape, by then `llm` below exists.
    providerBreakers: () =>
      llm.catalogue.providers.map(({ name }) => ({
        provider: name,
        open: llm.router.isProviderOpen(name),
      })),
  });
  const hub = createEventHub({
    db: database.db,
    listenUrl: options.config.DATABASE_LISTEN_URL ?? options.databaseUrl,
    origin: replicaId,
    applicationName: connectionName,
    log: options.log,
    onPrincipalsChanged: (change) => {
      // A key another replica issued is known here as active from now on.
      // Nothing of it can be cached to drop, and a drop would also keep
      // the result of every load in flight out of the cache.
      if (change.issuedKeyHash) principalCache.know([Buffer.from(change.issuedKeyHash, 'hex')]);
      else principalCache.drop(change);
    },
    onListening: (up) => principalCache.setListening(up),
    onPublished: metrics.observeEvents,
  });
  const llm = createLlm({
    config: options.config,
    env: options.env ?? {},
    db: database.db,
    log: options.log,
    onAttempt: metrics.observeAttempt,
    onProbe: metrics.observeProbe,
  });
  const budgetDefaults = configuredBudget(options.config);
  const sessions = createSessionService({ db: database.db, catalogue: llm.catalogue });
  const endpointsMemory = createEndpointsMemory();
  const builtins = builtinTools(options.config);
  /** A run launched without its tenant's tools reads them; the next workflows start early with them. */
  const readTenantEndpoints = async (tenantId: string) => {
    const read = await listTenantEndpoints(database.db, tenantId);
    endpointsMemory.remember(tenantId, read);
    return read.endpoints;
  };
  /** HTTP tools and MCP servers: one address policy, and a change makes the tenant's next workflow read them. */
  const endpointServices = {
    db: database.db,
    policy: {
      allowedHosts: options.config.HTTP_TOOLS_ALLOWED_HOSTS,
      allowPrivate: options.config.HTTP_TOOLS_ALLOW_PRIVATE,
    },
    log: options.log,
    onChanged: endpointsMemory.forget,
  };
  const httpTools = createHttpToolsService({
    ...endpointServices,
    maxPerTenant: options.config.HTTP_TOOLS_MAX_PER_TENANT,
  });
  const mcpServers = createMcpServersService({
    ...endpointServices,
    maxPerTenant: options.config.MCP_SERVERS_MAX_PER_TENANT,
    ...(options.config.MCP_TOOLS_CACHE_MS > 0 && {
      toolLists: createMcpToolLists({ ttlMs: options.config.MCP_TOOLS_CACHE_MS }),
    }),
  });
  const pipelineSettings: PipelineSettings = {
    maxStages: options.config.PIPELINE_MAX_STAGES,
    maxValidationRetries: options.config.PIPELINE_STAGE_RETRIES,
    stageResultMaxChars: options.config.PIPELINE_STAGE_RESULT_MAX_CHARS,
    synthesisResultMaxChars: options.config.PIPELINE_SYNTHESIS_RESULT_MAX_CHARS,
  };
  const executor = createExecutor({
    db: database.db,
    transitionBatches: createReplicaTransitionBatches(database.db, batchLimits),
    hub,
    router: llm.router,
    catalogue: llm.catalogue,
    usageRows: llm.ledger.rowsOf,
    executions,
    sessions,
    sessionHistory: {
      budgetTokens: options.config.SESSION_HISTORY_MAX_TOKENS,
      floorTurns: options.config.SESSION_HISTORY_FLOOR_TURNS,
    },
    orchestrator: {
      classifier: classifierSettings(options.config, llm.catalogue),
      builtinTools: builtins,
      tenantTools: async (tenantId, known) => {
        const endpoints = known ?? (await readTenantEndpoints(tenantId));
        const http = httpTools.toolsOf(tenantId, endpoints.httpTools);
        const mcp = await mcpServers.toolsOf(tenantId, endpoints.mcpServers);
        return { tools: [...http, ...mcp.tools], unavailable: mcp.unavailable, close: mcp.close };
      },
      defaultBudget: budgetDefaults,
      costOf: turnCost(llm.catalogue),
      toolOutputMaxChars: options.config.TOOL_OUTPUT_MAX_CHARS,
      toolsMaxOffered: options.config.TOOLS_MAX_OFFERED,
      toolCalls: {
        maxPerTurn: options.config.TOOL_CALLS_MAX_PER_TURN,
        concurrency: options.config.TOOL_CALLS_CONCURRENCY,
      },
      pipeline: pipelineSettings,
    },
    replicaId,
    log: options.log,
    leaseMs: options.config.WORKFLOW_LEASE_MS,
    renewEveryMs: options.config.WORKFLOW_LEASE_RENEW_MS,
    maxTakeoversWithoutProgress: options.config.WORKFLOW_MAX_TAKEOVERS,
  });
  const workflows = createWorkflowService({
    endpointsMemory,
    unknownToolNames: createToolNameCheck({
      builtins: builtins.map((tool) => tool.name),
      remembered: (tenantId) => endpointsMemory.get(tenantId)?.endpoints,
      read: readTenantEndpoints,
    }),
    insertBatches: createWorkflowInsertBatches({
      ...batchLimits,
      db: database.db,
      alone: workflowsRepository(database.db).insert,
    }),
    runsInFlight: executions.size,
    db: database.db,
    catalogue: llm.catalogue,
    hub,
    sessions,
    replicaId,
    log: options.log,
    leaseMs: options.config.WORKFLOW_LEASE_MS,
    launch: executor.launch,
    stopLocalRun: (workflowId) => executions.stop(workflowId, 'cancelled'),
    budgetDefaults,
  });
  return {
    replicaId,
    hub,
    metrics,
    config: options.config,
    log: options.log,
    database,
    migrations: options.migrations,
    startup: startupGate(!options.holdReadiness),
    tenancy: createTenancyService(database.db, { principals: principalCache, replicaId }),
    principalCache,
    rateLimitCounts: createRateLimitCounts({
      windowMs: options.config.RATE_LIMIT_WINDOW_MS,
      syncEveryMs: options.config.RATE_LIMIT_SYNC_MS,
      db: database.db,
      log: options.log,
      onSync: metrics.observeRateLimitSync,
    }),
    httpTools,
    mcpServers,
    llm,
    executions,
    sessions,
    usageReports: createUsageReports(database.db, {
      timeoutMs: options.config.USAGE_REPORT_TIMEOUT_MS,
    }),
    retention: createRetentionSweeper({
      db: database.db,
      log: options.log,
      retentionDays: options.config.WORKFLOW_RETENTION_DAYS,
      ledgerRetentionDays: options.config.USAGE_LEDGER_RETENTION_DAYS,
      revokedKeyRetentionDays: options.config.REVOKED_KEY_RETENTION_DAYS,
      pausedExpiry: {
        days: options.config.PAUSED_WORKFLOW_EXPIRY_DAYS,
        expire: workflows.expirePaused,
      },
      intervalMs: options.config.RETENTION_SWEEP_INTERVAL_MS,
      onSwept: metrics.observeSweep,
    }),
    reclaimer: createLeaseReclaimer({
      db: database.db,
      log: options.log,
      replicaId,
      leaseMs: options.config.WORKFLOW_LEASE_MS,
      intervalMs: options.config.LEASE_RECLAIM_INTERVAL_MS,
      resume: (workflow, { lease, takeoversWithoutProgress }) =>
        executor.launch({
          workflow,
          cause: 'reclaimed',
          lease,
          preload: { takeoversWithoutProgress },
        }),
      runningHere: executions.ids,
      onTakenOver: metrics.observeTakeovers,
    }),
    workflows,
    reviews: createPipelineReviews({
      db: database.db,
      workflows,
      settings: pipelineSettings,
    }),
  };
}

/**
 * Releases what the services hold, in order: runs still going are
 * interrupted first (main.ts drains them with a grace period before), and
 * the ledger's last rows need the pool.
 */
export async function closeServices(services: Services): Promise<void> {
  await services.retention.stop();
  await services.reclaimer.stop();
  await services.executions.drain(0);
  await services.hub.close();
  await services.llm.close();
  // After the HTTP server has closed (main.ts): no request counts after this last sync.
  await services.rateLimitCounts.close();
  await services.database.close();
}

/** `auto`: only with the embedded PostgreSQL, which no pooler stands in front of. */
export function usesPreparedStatements(config: Config): boolean {
  const setting = config.DATABASE_PREPARED_STATEMENTS;
  return setting === 'auto' ? config.DATABASE_URL === undefined : setting === 'on';
}

export interface StartupGate {
  isComplete(): boolean;
  complete(): void;
}

function startupGate(complete: boolean): StartupGate {
  let done = complete;
  return {
    isComplete: () => done,
    complete: () => {
      done = true;
    },
  };
}
