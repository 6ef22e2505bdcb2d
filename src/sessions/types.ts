/**
 * A session is a conversation that groups workflows (see the terminology
 * in src/workflows/types.ts). Its messages are the questions and answers
 * of its completed workflows, in order; a later workflow of the session
 * sees them as history.
 */

import type { ListOrder } from '../store/list-position.js';

export const SESSION_ROLES = ['user', 'assistant'] as const;
export type SessionRole = (typeof SESSION_ROLES)[number];

/**
 * The orders sessions are listed in, newest first: by creation (the
 * default), or by last activity (`lastActivityAt`), as a chat lists its
 * conversations.
 */
export const SESSION_ORDERS = ['created', 'activity'] as const satisfies readonly ListOrder[];
export type SessionOrder = (typeof SESSION_ORDERS)[number];

export interface Session {
  id: string;
  tenantId: string;
  title: string | null;
  metadata: Record<string, unknown>;
  /** Catalogue name the session's workflows use when their request names none; null: none. */
  model: string | null;
  /** Seq of the latest message; 0 while there is none. */
  lastSeq: number;
  createdAt: Date;
  /** Its last change: a message appended, or its title, metadata or model changed. */
  updatedAt: Date;
  /** When its last message was appended; its creation while it has none. */
  lastActivityAt: Date;
}

export interface SessionMessage {
  /** 1, 2, 3... without gaps, per session. */
  seq: number;
  role: SessionRole;
  content: string;
  /** The workflow whose question or answer this is. */
  workflowId: string | null;
  createdAt: Date;
}
