/**
 * A session is a conversation that groups workflows (see the terminology
 * in src/workflows/types.ts). Its messages are the questions and answers
 * of its completed workflows, in order; a later workflow of the session
 * sees them as history.
 */

export const SESSION_ROLES = ['user', 'assistant'] as const;
export type SessionRole = (typeof SESSION_ROLES)[number];

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
  updatedAt: Date;
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
