import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { bearer, type TestApp } from './app.js';
import type { TestTenant } from './workflows.js';

/** Helpers for tests that read sessions through the HTTP API of a test app and append to them. */

/** A session message as the API answers it. */
export interface WireMessage {
  seq: number;
  role: string;
  content: string;
  workflowId: string | null;
}

/**
 * Session helpers over the test file's app, which is read when they are
 * called: the file's beforeAll starts it.
 */
export function sessionHelpers(app: () => TestApp) {
  function getSession(key: string, id: string, query = '') {
    return app().app.inject({
      method: 'GET',
      url: `/v1/sessions/${id}${query}`,
      headers: bearer(key),
    });
  }

  async function sessionMessages(key: string, id: string): Promise<WireMessage[]> {
    const response = await getSession(key, id, '?limit=200');
    expect(response.statusCode, response.body).toBe(200);
    return response.json().messages;
  }

  /** Appends question `q<n>` and answer `a<n>` of a made-up workflow id. */
  function appendExchange(
    tenant: TestTenant,
    sessionId: string,
    n: number,
    workflowId = randomUUID(),
  ) {
    return app().services.sessions.appendExchange({
      tenantId: tenant.id,
      sessionId,
      workflowId,
      question: `q${n}`,
      answer: `a${n}`,
    });
  }

  return { getSession, sessionMessages, appendExchange };
}
