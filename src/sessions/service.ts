import { randomUUID } from 'node:crypto';
import { conflict, notFound } from '../errors.js';
import type { Catalogue } from '../llm/catalogue.js';
import { selectModel, type TenantModelSettings } from '../llm/model-selection.js';
import type { Message } from '../llm/types.js';
import { type Db, inTransaction } from '../store/database.js';
import { decodeCursor, pageOf } from '../store/list-position.js';
import type { SessionMessageRow, SessionRow } from '../store/schema.js';
import {
  exchangeAppend,
  exchangeAppendedColumn,
  type SessionChange,
  type SessionExchange,
  sessionsRepository,
} from '../store/sessions.js';
import {
  extendReach,
  type HistoryMessage,
  type HistoryOptions,
  type HistoryReach,
  historyIsComplete,
  trimHistory,
} from './history.js';
import {
  SESSION_ORDERS,
  type Session,
  type SessionMessage,
  type SessionOrder,
  type SessionRole,
} from './types.js';

/** What a client gives when it creates a session (already validated at the boundary). */
export interface NewSession {
  title?: string;
  metadata?: Record<string, unknown>;
  model?: string;
}

export interface SessionWithMessages {
  session: Session;
  messages: SessionMessage[];
  /** Pass as `after` for the next page; null on the last page. */
  nextAfter: number | null;
}

export interface SessionPage {
  items: Session[];
  /** Opaque; pass it as `cursor` for the next page. Null on the last page. */
  nextCursor: string | null;
}

/**
 * The start of a new workflow's history, read with its session
 * (`findForWorkflow`): the session's newest messages, newest first, up to
 * `throughSeq`, its `last_seq` then, which the workflow's row keeps
 * (`session_seq`), so every run of it reads the same history.
 */
export interface SessionHistoryStart {
  throughSeq: number;
  newestFirst: { seq: number; role: SessionRole; content: string }[];
}

/**
 * Rows read per round trip when history is read backwards. A pair of a
 * typical chat is a few hundred tokens, so one page covers the default
 * 8,000-token budget in most sessions.
 */
const HISTORY_PAGE_ROWS = 64;

/** workflows.session_id is text; only a uuid can name a session (comparing another text to a uuid column is an error). */
const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Sessions as the API and the orchestrator see them: create, read, append, history. */
export function createSessionService(options: { db: Db; catalogue: Catalogue }) {
  const { db, catalogue } = options;
  const repository = sessionsRepository(db);

  return {
    /** A session's `model` must be one the tenant may use, as a request's must. */
    async create(
      tenant: { id: string } & TenantModelSettings,
      input: NewSession,
    ): Promise<Session> {
      if (input.model !== undefined) selectModel({ catalogue, tenant, requested: input.model });
      const row = await repository.insert({
        id: randomUUID(),
        tenantId: tenant.id,
        title: input.title ?? null,
        metadata: input.metadata ?? {},
        model: input.model ?? null,
      });
      return toSession(row);
    },

    /**
     * The tenant's sessions, newest first in `order` (by creation, or by
     * last activity); `cursor` continues after a previous page of the same
     * order (400 `cursor_order_mismatch` for the other's); with
     * `metadata`, those whose metadata contains it.
     */
    async list(
      tenantId: string,
      query: {
        order: SessionOrder;
        limit: number;
        cursor?: string;
        metadata?: Record<string, unknown>;
      },
    ): Promise<SessionPage> {
      const { order } = query;
      const rows = await repository.list(tenantId, {
        order,
        metadata: query.metadata,
        // One more than asked tells whether another page follows.
        limit: query.limit + 1,
        after:
          query.cursor === undefined
            ? undefined
            : decodeCursor(query.cursor, { order, offered: SESSION_ORDERS }),
      });
      return pageOf(rows, { limit: query.limit, order }, toSession);
    },

    /** Renames the session, replaces its metadata or its model (checked as `create` checks it). */
    async update(
      tenant: { id: string } & TenantModelSettings,
      id: string,
      change: SessionChange,
    ): Promise<Session> {
      if (typeof change.model === 'string')
        selectModel({ catalogue, tenant, requested: change.model });
      const row = await repository.update(tenant.id, id, change);
      if (!row) throw notFound('Session');
      return toSession(row);
    },

    /**
     * Deletes the session with its messages and its workflows; 409
     * `session_has_open_workflows` while one of them has not ended (cancel
     * it first). Returns how many workflows went with it.
     */
    async delete(tenantId: string, id: string): Promise<{ workflows: number }> {
      const deletion = await inTransaction(db, async (tx) => {
        const inTx = sessionsRepository(tx);
        await inTx.lockForDelete(tenantId, id);
        return inTx.deleteIfIdle(tenantId, id);
      });
      switch (deletion.outcome) {
        case 'not_found':
          throw notFound('Session');
        case 'open_workflows':
          throw conflict(
            'session_has_open_workflows',
            'The session has workflows that have not ended; cancel them (or let them end) first',
            { openWorkflowIds: deletion.workflowIds },
          );
        case 'deleted':
          return { workflows: deletion.workflows };
      }
    },

    /** The session with a page of its messages, oldest first, after seq `after`. */
    async get(
      tenantId: string,
      id: string,
      page: { after: number; limit: number },
    ): Promise<SessionWithMessages> {
      const row = await repository.findById(tenantId, id);
      if (!row) throw notFound('Session');
      // Messages an append committed after the session row was read would
      // be past its lastSeq: those up to it were all committed with it.
      const rows = await repository.listAfter({
        tenantId,
        sessionId: id,
        afterSeq: page.after,
        throughSeq: row.last_seq,
        // One more than asked tells whether another page follows.
        limit: page.limit + 1,
      });
      const messages = rows.slice(0, page.limit).map(toSessionMessage);
      const last = messages.at(-1);
      return {
        session: toSession(row),
        messages,
        nextAfter: rows.length > page.limit && last ? last.seq : null,
      };
    },

    /**
     * The tenant's session with this id, as a new workflow of it needs it
     * (any text: workflows name sessions as text), with the start of that
     * workflow's history; undefined when none.
     */
    async findForWorkflow(
      tenantId: string,
      id: string,
    ): Promise<{ session: Session; historyStart: SessionHistoryStart } | undefined> {
      if (!UUID_PATTERN.test(id)) return undefined;
      const row = await repository.findWithNewestMessages(tenantId, id, HISTORY_PAGE_ROWS);
      if (!row) return undefined;
      const { newest, ...session } = row;
      return {
        session: toSession(session),
        historyStart: {
          throughSeq: session.last_seq,
          newestFirst: newest.map((message) => ({
            seq: message.seq,
            role: message.role as SessionRole,
            content: message.content,
          })),
        },
      };
    },

    /**
     * Appends a completed workflow's question and answer by itself (a
     * workflow's completion appends them in its own statement, with
     * `exchangeAfterTransition`). At most once per workflow; false when
     * nothing was appended.
     */
    async appendExchange(exchange: SessionExchange): Promise<boolean> {
      return (await repository.appendExchange(exchange)).length > 0;
    },

    /**
     * The writes that append a completed workflow's question and answer in
     * its completion's statement (workflows/transitions.ts
     * `alsoInStatement`), and the column that tells whether they did
     * (`also.session_appended`, the messages appended).
     */
    exchangeAfterTransition(exchange: SessionExchange) {
      return {
        writes: exchangeAppend(exchange, { inTransition: true }),
        appended: exchangeAppendedColumn(),
      };
    },

    /**
     * The history a workflow of the session sees before its own input: the
     * latest messages that fit the budget (see trimHistory). Read backwards
     * a page at a time, only as far back as the budget and floor reach.
     * With `workflowId`, only what the session held when that workflow was
     * created: a run resumed after a pause or a takeover sees the history
     * its first run saw, not the exchanges of workflows completed since.
     * With `start`, read with the session when the workflow was created,
     * that is its first page (and the rest lies before it).
     */
    async historyFor(
      tenantId: string,
      sessionId: string,
      historyOptions: HistoryOptions & { workflowId?: string; start?: SessionHistoryStart },
    ): Promise<Message[]> {
      const newestFirst: HistoryMessage[] = [];
      let reach: HistoryReach = { pairs: 0, tokens: 0 };
      let beforeSeq: number | undefined;
      let readToStart = false;
      let given = historyOptions.start?.newestFirst;
      while (!historyIsComplete(reach, historyOptions)) {
        const rows =
          given ??
          (await repository.listBefore({
            tenantId,
            sessionId,
            beforeSeq,
            ...(historyOptions.workflowId ? { beforeWorkflow: historyOptions.workflowId } : {}),
            limit: HISTORY_PAGE_ROWS,
          }));
        given = undefined;
        const page = rows.map((row) => ({ role: row.role as SessionRole, content: row.content }));
        newestFirst.push(...page);
        reach = extendReach(reach, page, historyOptions.kind);
        const oldest = rows.at(-1);
        if (!oldest || rows.length < HISTORY_PAGE_ROWS) {
          readToStart = true;
          break;
        }
        beforeSeq = oldest.seq;
      }
      const messages = newestFirst.reverse();
      // A page may begin with an answer whose question lies before it; such an answer is not history on its own.
      const firstQuestion = messages.findIndex((message) => message.role === 'user');
      const whole = readToStart ? messages : firstQuestion < 0 ? [] : messages.slice(firstQuestion);
      return trimHistory(whole, historyOptions);
    },
  };
}

export type SessionService = ReturnType<typeof createSessionService>;

function toSession(row: SessionRow): Session {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    title: row.title,
    metadata: row.metadata,
    model: row.model,
    lastSeq: row.last_seq,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    lastActivityAt: row.last_activity_at,
  };
}

/** Rows are written only through this module, so `role` holds a SessionRole. */
function toSessionMessage(row: SessionMessageRow): SessionMessage {
  return {
    seq: row.seq,
    role: row.role as SessionRole,
    content: row.content,
    workflowId: row.workflow_id,
    createdAt: row.created_at,
  };
}
