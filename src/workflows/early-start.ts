import { setNewest } from '../bounded-map.js';
import type { SessionHistoryStart } from '../sessions/service.js';
import type { VersionedEndpoints } from '../store/tenant-endpoints.js';
import type { InsertedWorkflow, NewWorkflowRow } from '../store/workflows.js';
import type { LeasedWorkflowRow } from './new-workflow-row.js';
import type { RunLaunch, RunPreload } from './service.js';
import type { Workflow, WorkflowBudget, WorkflowMode } from './types.js';

/**
 * A new workflow's run starts while its insert is in flight, so the run's
 * start and its first model request overlap the insert's round trip and
 * WAL flush (~0.55 ms at concurrency 1; bench/simple-path's overhead p50
 * read 3.52, 3.64 and 3.65 ms against 4.24, 3.65 and 3.92 without, in
 * alternated runs, 2026-12-01). Nothing
 * of the run happens before the insert has committed: its tracker writes
 * nothing (tracker/unit-writer.ts) and its first turn's tool calls run
 * only then (tool-loop/call-model.ts), so no event, tool call or row
 * exists for a workflow that does not.
 *
 * The run needs the tenant's HTTP tools and MCP servers for its first
 * request. It starts with those this replica read for the tenant last,
 * remembered with their version (store/tenant-endpoints.ts
 * `VersionedEndpoints`), and the insert reads the tenant's version: when
 * it is another (a tool registered or removed meanwhile), the early run
 * is superseded and a run that reads the tools replaces it (its request
 * is wasted, its reply never read), as it does when the insert fails. A
 * tool registered or removed on this replica makes the tenant's next
 * workflow start after its insert, as does a tenant's first workflow here
 * and every workflow with an Idempotency-Key. A run launched without the
 * tools reads them (with their version, which the replica then remembers).
 *
 * A workflow in a session needs the start of its history too: the create
 * read it with the session, up to the session's `last_seq` then, which the
 * insert writes (NewWorkflowRow's `sessionSeq`), so both runs see what
 * every later run of the workflow will.
 */

/**
 * Runs in progress on the replica up to which a new one starts early.
 * The early start hides the insert's round trip in time the event loop
 * would spend waiting; with many runs in flight it has none to spare, and
 * starting early cost throughput: at concurrency 32 bench/simple-path made
 * 254-288 workflows/s against 294-313 without (four alternated pairs,
 * 2026-12-01), every part (the service, PostgreSQL, the load) spending
 * 10-20% more CPU per workflow, though no statement or request more.
 */
export const EARLY_START_MAX_RUNS = 4;

/**
 * Inserts a new workflow and launches its run: while the insert is in
 * flight (`early`) when the tenant's tools are remembered, after it
 * otherwise or when the early run is superseded, with the tools
 * remembered when the insert saw their version, else to read them. Throws
 * what the insert threw, the early run superseded.
 */
export async function insertAndLaunch(options: {
  row: LeasedWorkflowRow;
  /** In a session: the start of the workflow's history, read with the session (both runs take it). */
  historyStart?: SessionHistoryStart;
  insert: (row: NewWorkflowRow) => Promise<InsertedWorkflow>;
  endpointsMemory: EndpointsMemory;
  launch: (launch: RunLaunch) => void;
  early: boolean;
}): Promise<Workflow> {
  const { row, endpointsMemory } = options;
  // The runs launched for the insert name the lease it writes: an early run
  // superseded writes nothing and leaves the lease to the one launched after it.
  const history = options.historyStart ? { historyStart: options.historyStart } : {};
  const launch = (workflow: Workflow, preload: RunPreload) =>
    options.launch({
      workflow,
      cause: 'created',
      lease: row.lease.owner,
      preload: { ...preload, ...history },
    });
  const inserting = options.insert(row);
  const remembered = endpointsMemory.get(row.tenantId);
  const started = options.early ? remembered : undefined;
  let outcome: InsertOutcome | undefined;
  if (started) {
    outcome = insertOutcome();
    launch(workflowAsInserted(row, new Date()), {
      endpoints: started.endpoints,
      created: outcome.committed,
    });
  }
  let inserted: InsertedWorkflow;
  try {
    inserted = await inserting;
  } catch (error) {
    outcome?.reject(new EarlyStartSuperseded('insert_failed'));
    throw error;
  }
  const workflow = workflowAsInserted(row, inserted.createdAt);
  const current = remembered?.version === inserted.endpointsVersion ? remembered : undefined;
  if (outcome && current) {
    outcome.resolve();
  } else {
    outcome?.reject(new EarlyStartSuperseded('endpoints_changed'));
    launch(workflow, current ? { endpoints: current.endpoints } : {});
  }
  return workflow;
}

/** Why an early run stopped without running: its insert failed, or read other tools. */
export class EarlyStartSuperseded extends Error {
  constructor(reason: 'insert_failed' | 'endpoints_changed') {
    super(`the early start of a workflow was superseded: ${reason}`);
    this.name = 'EarlyStartSuperseded';
  }
}

/** A promise that the workflow service settles once the insert has answered. */
export interface InsertOutcome {
  readonly committed: Promise<void>;
  resolve(): void;
  reject(error: unknown): void;
}

export function insertOutcome(): InsertOutcome {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const committed = new Promise<void>((onResolve, onReject) => {
    resolve = onResolve;
    reject = onReject;
  });
  // Awaited by the run's writes and its first turn; a run that stopped before either is not told.
  committed.catch(() => undefined);
  return { committed, resolve, reject };
}

/**
 * The workflow as its insert writes it, created at `now`: for a run that
 * starts before the insert answers, and for the created workflow itself
 * (the insert returns only its time).
 */
export function workflowAsInserted(row: NewWorkflowRow, now: Date): Workflow {
  return {
    id: row.id,
    tenantId: row.tenantId,
    sessionId: row.sessionId,
    status: 'queued',
    awaitingReason: null,
    mode: row.mode as WorkflowMode,
    kind: null,
    model: row.model,
    input: row.input,
    tools: row.tools,
    metadata: row.metadata,
    version: 1,
    lastSeq: 0,
    result: null,
    error: null,
    usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, costUsd: 0 },
    budget: (row.budget as WorkflowBudget | undefined) ?? null,
    createdAt: now,
    updatedAt: now,
    startedAt: null,
    finishedAt: null,
  };
}

/**
 * The tools this replica read last for each tenant, with their version. At
 * most `limit` tenants, the one read longest ago dropped first.
 */
export function createEndpointsMemory(limit = 1_000) {
  const remembered = new Map<string, VersionedEndpoints>();
  return {
    get: (tenantId: string): VersionedEndpoints | undefined => remembered.get(tenantId),
    remember(tenantId: string, read: VersionedEndpoints): void {
      setNewest(remembered, tenantId, read, limit);
    },
    /** A tool of the tenant was registered or removed here: its next workflow starts after its insert. */
    forget(tenantId: string): void {
      remembered.delete(tenantId);
    },
  };
}

export type EndpointsMemory = ReturnType<typeof createEndpointsMemory>;
