import type { Logger } from 'pino';
import { conflict, notFound } from '../errors.js';
import type { Catalogue } from '../llm/catalogue.js';
import type { SessionHistoryStart, SessionService } from '../sessions/service.js';
import type { Db } from '../store/database.js';
import { decodeCursor, pageOf } from '../store/list-position.js';
import type { PipelineRows } from '../store/pipeline-rows.js';
import type { TenantEndpoints } from '../store/tenant-endpoints.js';
import { type NewEventRow, workflowEventsRepository } from '../store/workflow-events.js';
import type { WorkflowInsertBatches } from '../store/workflow-insert-batches.js';
import { newLeaseOwner } from '../store/workflow-leases.js';
import { SessionGone, workflowsRepository } from '../store/workflows.js';
import type { Principal } from '../tenancy/types.js';
import type { EventHub } from '../tracker/event-hub.js';
import { createWorkflowTracker } from '../tracker/tracker.js';
import { type ApprovalInput, approvalEvent } from './approval.js';
import type { RequestedBudget } from './budget.js';
import { createCancellation } from './cancellation.js';
import { checkAnswer } from './clarification.js';
import { EARLY_START_MAX_RUNS, type EndpointsMemory, insertAndLaunch } from './early-start.js';
import {
  hashRequest,
  idempotencyKeyBusy,
  isIdempotencyKeyTaken,
  KEYED_INSERT_TRIES,
} from './idempotency.js';
import { type CheckedWorkflow, checkedWorkflowRows, unknownSession } from './new-workflow-row.js';
import { toWorkflow } from './rows.js';
import { assertAwaiting, assertVersion, type TransitionInput } from './transitions.js';
import type {
  AwaitingReason,
  Workflow,
  WorkflowBudget,
  WorkflowMode,
  WorkflowStatus,
} from './types.js';

/**
 * What the run need not read again: the tenant's tools (remembered, for
 * a create whose insert saw their version; read by a resume's statement),
 * the pipeline's rows as a review left them.
 */
export interface RunPreload {
  endpoints?: TenantEndpoints;
  pipeline?: PipelineRows;
  /**
   * A run launched while its workflow's insert is in flight: settles once
   * the insert has answered; rejects when the run is superseded
   * (early-start.ts).
   */
  created?: Promise<void>;
  /**
   * A takeover by the lease sweep: it and the takeovers right before it
   * that found nothing completed since (claimExpiredLeases).
   */
  takeoversWithoutProgress?: number;
  /** A new workflow in a session: the start of its history, read with the session by the create. */
  historyStart?: SessionHistoryStart;
}

/** Why a paused workflow runs again: the user answered its question, decided on a tool call, or reviewed a pipeline stage. */
export type ResumeCause = 'answered' | 'approved' | 'reviewed';

/** A run to start here, from the statement that made its workflow runnable (an insert, a resume). */
export interface RunLaunch {
  /** As that statement left it. */
  workflow: Workflow;
  cause: 'created' | ResumeCause;
  /** The lease owner that statement wrote (newLeaseOwner's): the run's writes, renewals and release name it. */
  lease: string;
  preload?: RunPreload;
}

/** What a client asks for when it creates a workflow (already validated at the boundary). */
export interface NewWorkflow {
  input: string;
  sessionId?: string;
  mode: WorkflowMode;
  /** Catalogue name; the tenant's or the system default when absent. */
  model?: string;
  tools?: string[];
  metadata?: Record<string, unknown>;
  /** Lower caps than the tenant's; see resolveBudget. */
  budget?: RequestedBudget;
}

export interface CreatedWorkflow {
  workflow: Workflow;
  /** True when an earlier request with the same Idempotency-Key created it. */
  replayed: boolean;
}

export interface WorkflowPage {
  items: Workflow[];
  /** Opaque; pass it as `cursor` for the next page. Null on the last page. */
  nextCursor: string | null;
}

export interface WorkflowServiceOptions {
  db: Db;
  catalogue: Catalogue;
  hub: EventHub;
  /** Checks that a workflow's sessionId names a session of its tenant, and reads its history's start. */
  sessions: Pick<SessionService, 'findForWorkflow'>;
  /** The tool names a workflow asks for that name no tool of its tenant (tools/tool-names.ts). */
  unknownToolNames: (tenantId: string, requested: readonly string[]) => Promise<string[]>;
  /**
   * This replica's id: the NOTIFY origin of the transitions made here, and
   * the prefix of the lease owners of the runs it launches (newLeaseOwner).
   */
  replicaId: string;
  /** How long the lease of a workflow created here lasts before its run renews it (WORKFLOW_LEASE_MS). */
  leaseMs: number;
  log: Logger;
  /**
   * Starts a workflow's run: a new one, or one the user's answer resumed.
   * Must not block or throw (the run reports its own failures).
   */
  launch: (launch: RunLaunch) => void;
  /** Stops a workflow's run if it runs on this replica. */
  stopLocalRun: (workflowId: string) => void;
  /** The configured budget (BUDGET_MAX_*), for tenants without overrides. */
  budgetDefaults: WorkflowBudget;
  /** The tools this replica read last for each tenant, for the runs that start before their insert answers. */
  endpointsMemory: EndpointsMemory;
  /** Workflow runs in progress on this replica: few enough, a new one starts early. */
  runsInFlight: () => number;
  /** Where inserts without an Idempotency-Key share statements (group commit); each alone when unset. */
  insertBatches?: WorkflowInsertBatches;
}

/**
 * Workflows as the API sees them: create (idempotently), read, list,
 * cancel. Status changes go through the WorkflowTracker, so each is one
 * transaction with its events.
 */
export function createWorkflowService(options: WorkflowServiceOptions) {
  const { db, endpointsMemory } = options;
  const newWorkflowRow = checkedWorkflowRows(options);
  const repository = workflowsRepository(db);

  /** The workflow an Idempotency-Key already made, if the request is the same one. */
  async function replayOf(
    tenantId: string,
    key: string,
    requestHash: string,
  ): Promise<CreatedWorkflow | undefined> {
    const existing = await repository.findByIdempotencyKey(tenantId, key);
    if (!existing) return undefined;
    if (existing.request_hash !== requestHash) {
      throw conflict(
        'idempotency_key_reused',
        'This Idempotency-Key was used for a different request; use a new key for a new workflow',
      );
    }
    return { workflow: toWorkflow(existing), replayed: true };
  }

  /** A tracker for one transition made on behalf of a request. */
  function trackerFor(tenantId: string, workflowId: string) {
    return createWorkflowTracker({
      db,
      hub: options.hub,
      tenantId,
      workflowId,
      origin: options.replicaId,
      log: options.log.child({ workflowId }),
    });
  }

  const cancellation = createCancellation({ db, trackerFor, stopLocalRun: options.stopLocalRun });

  return {
    /**
     * Creates a workflow `queued` at version 1 and launches its run. With an
     * Idempotency-Key, the same request again returns the workflow it made
     * (and launches nothing); a different request under the key is a 409.
     * The insert finds out: concurrent requests with one key race on the
     * unique index, one inserts, the others read its row (a row deleted
     * before that read freed the key: the insert goes again,
     * KEYED_INSERT_TRIES). A repeated request costs that failed insert
     * (and its batch a second try), where reading the key first, with
     * keyed inserts kept out of batches, cost every keyed create
     * (bench/simple-path --idempotency-keys, 2026-12-03, three alternated
     * pairs: 4.05 round trips per workflow against 3.04, 282-335
     * workflows/s at concurrency 32 against 433-447).
     */
    async create(
      principal: Principal,
      input: NewWorkflow,
      idempotencyKey?: string,
    ): Promise<CreatedWorkflow> {
      const tenantId = principal.tenant.id;
      const requestHash = idempotencyKey === undefined ? null : hashRequest(input);
      const replay = async (): Promise<CreatedWorkflow | undefined> =>
        idempotencyKey === undefined || requestHash === null
          ? undefined
          : replayOf(tenantId, idempotencyKey, requestHash);
      let checked: CheckedWorkflow;
      try {
        checked = await newWorkflowRow(principal, input);
      } catch (error) {
        // A retry of a request accepted before answers as it did then, whatever
        // changed since (its model no longer allowed, one of its tools removed).
        const replayed = await replay();
        if (replayed) return replayed;
        throw error;
      }
      for (let tries = 1; ; tries += 1) {
        try {
          const workflow = await insertAndLaunch({
            row: { ...checked.row, idempotencyKey: idempotencyKey ?? null, requestHash },
            historyStart: checked.historyStart,
            insert: options.insertBatches?.run ?? repository.insert,
            endpointsMemory,
            launch: options.launch,
            // Not with an Idempotency-Key: the insert may find the workflow made
            // already, and a run started before it answers would have called the
            // model for nothing.
            early: idempotencyKey === undefined && options.runsInFlight() < EARLY_START_MAX_RUNS,
          });
          return { workflow, replayed: false };
        } catch (error) {
          // Deleted since newWorkflowRow read it: as if it had been gone then.
          if (error instanceof SessionGone) throw unknownSession();
          if (!isIdempotencyKeyTaken(error)) throw error;
          const replayed = await replay();
          if (replayed) return replayed;
          // The workflow that had the key was deleted before the read: the key
          // is free, and the insert goes again (nothing of it was written).
          if (tries >= KEYED_INSERT_TRIES) throw idempotencyKeyBusy(error);
        }
      }
    },

    async get(tenantId: string, id: string): Promise<Workflow> {
      const row = await repository.findById(tenantId, id);
      if (!row) throw notFound('Workflow');
      return toWorkflow(row);
    },

    /**
     * Deletes an ended workflow with its events, turns and plans; 409
     * `workflow_not_finished` while it is queued, running or paused (cancel
     * it first). Its usage ledger rows and, in a session, its messages are
     * kept, as when the retention sweep deletes it.
     */
    async delete(tenantId: string, id: string): Promise<void> {
      const deletion = await repository.deleteIfEnded(tenantId, id);
      if (!deletion) throw notFound('Workflow');
      if (deletion.deleted) return;
      throw conflict(
        'workflow_not_finished',
        'The workflow has not ended; cancel it (or let it end) first',
        {
          status: deletion.status,
          awaitingReason: deletion.awaiting_reason,
          version: deletion.version,
        },
      );
    },

    /** Newest first; `cursor` continues after the last item of a previous page. */
    async list(
      tenantId: string,
      query: { sessionId?: string; status?: WorkflowStatus; limit: number; cursor?: string },
    ): Promise<WorkflowPage> {
      const rows = await repository.list(tenantId, {
        sessionId: query.sessionId,
        status: query.status,
        // One more than asked tells whether another page follows.
        limit: query.limit + 1,
        after: query.cursor === undefined ? undefined : decodeCursor(query.cursor),
      });
      return pageOf(rows, { limit: query.limit, order: 'created' }, toWorkflow);
    },

    /**
     * Answers the question a paused workflow asked (`ask_user`) and resumes
     * it: one transaction checks, under the row lock, that the workflow
     * still waits for a clarification at the version the answer was
     * checked against (or the one the client sent), moves it back to
     * `running` and records the answer as a `clarification_answer` event,
     * from which the run takes it as the question's result. Of concurrent
     * answers exactly one is accepted; the others get 409.
     */
    async answer(
      tenantId: string,
      id: string,
      input: { answer: string; version?: number },
    ): Promise<Workflow> {
      const row = await repository.findById(tenantId, id);
      if (!row) throw notFound('Workflow');
      const paused = toWorkflow(row);
      assertAwaiting(paused, ['clarification']);
      // Before the answer is checked against the question asked now: a client
      // that saw an earlier one is told so, not that its answer does not fit.
      if (input.version !== undefined) assertVersion(paused, input.version);
      // The question the row read above waits on, not one asked since (after
      // another client's answer): the answer to that gets the 409 below.
      const questions = await workflowEventsRepository(db).listOfType({
        tenantId,
        workflowId: id,
        type: 'clarification_request',
        throughSeq: paused.lastSeq,
      });
      const question = questions.at(-1);
      if (!question) throw new Error(`workflow ${id} awaits a clarification it never asked for`);
      const answer = checkAnswer(question.detail, input.answer);
      return this.resume(tenantId, id, {
        fromAwaiting: ['clarification'],
        expectedVersion: input.version ?? paused.version,
        cause: 'answered',
        events: [
          {
            type: 'clarification_answer',
            step: question.step,
            status: 'completed',
            detail: { toolCallId: question.detail.toolCallId, answer },
            elapsedMs: null,
          },
        ],
      });
    },

    /**
     * Approves or declines the tool call a paused workflow waits on
     * (awaiting_input, tool_approval) and resumes it: the decision is a
     * `tool_approval` event written with the transition back to `running`
     * (approval.ts), from which the run, or one taking it over, takes it.
     * Of concurrent decisions exactly one is accepted; the others get 409.
     */
    async approve(tenantId: string, id: string, input: ApprovalInput): Promise<Workflow> {
      const { event, version } = await approvalEvent(db, { tenantId, id }, input);
      return this.resume(tenantId, id, {
        fromAwaiting: ['tool_approval'],
        expectedVersion: version,
        cause: 'approved',
        events: [event],
      });
    },

    /**
     * Moves a paused workflow back to `running` and launches its run here:
     * the compare-and-set every user action on a paused workflow goes
     * through. Under the row lock the workflow must still wait for one of
     * `fromAwaiting` at `expectedVersion` (409 otherwise), and the action's
     * events and writes (`alsoInStatement`) commit with the status change
     * or not at all, so the run always finds what the user decided.
     */
    async resume(
      tenantId: string,
      id: string,
      change: {
        fromAwaiting: readonly AwaitingReason[];
        expectedVersion: number;
        cause: ResumeCause;
        events: NewEventRow[];
        alsoInStatement?: TransitionInput['alsoInStatement'];
        alsoSelect?: TransitionInput['alsoSelect'];
        /** The pipeline's rows as the action left them, from what `alsoSelect` read. */
        pipelineAfter?: (also: Record<string, unknown>) => PipelineRows;
      },
    ): Promise<Workflow> {
      const tracker = trackerFor(tenantId, id);
      // Launched here below: its run holds the lease from the transition on.
      const lease = newLeaseOwner(options.replicaId);
      try {
        const { workflow, endpoints, also } = await tracker.transition({
          to: 'running',
          lease: { owner: lease, leaseMs: options.leaseMs },
          fromAwaiting: change.fromAwaiting,
          expectedVersion: change.expectedVersion,
          events: change.events,
          alsoInStatement: change.alsoInStatement,
          alsoSelect: change.alsoSelect,
        });
        options.launch({
          workflow,
          cause: change.cause,
          lease,
          preload: { endpoints, pipeline: change.pipelineAfter?.(also) },
        });
        return workflow;
      } finally {
        tracker.close();
      }
    },

    cancel: cancellation.cancel,
    cancelOpen: cancellation.cancelOpen,
    expirePaused: cancellation.expirePaused,
  };
}

export type WorkflowService = ReturnType<typeof createWorkflowService>;
