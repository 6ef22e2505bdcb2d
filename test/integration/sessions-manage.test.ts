import { describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import { lockWaiter } from '../support/database.js';
import { sessionHelpers } from '../support/sessions.js';
import {
  cancelWorkflow,
  createSession,
  postWorkflow,
  startWorkflow,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/**
 * A client's sessions over the API: listed newest first, changed with
 * PATCH and deleted with what they hold. Creating and reading them is in
 * sessions.test.ts.
 */

const { app, newTenant } = useScriptedApp();
const { getSession, sessionMessages } = sessionHelpers(app);

function request(
  tenant: TestTenant,
  method: 'GET' | 'PATCH' | 'DELETE',
  url: string,
  payload?: unknown,
) {
  return app().app.inject({
    method,
    url,
    headers: bearer(tenant.key),
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
}

/** A workflow of the session that completed, its question and answer appended. */
async function completedIn(tenant: TestTenant, sessionId: string, input: string): Promise<string> {
  const id = await startWorkflow(app(), tenant.key, { input, sessionId, mode: 'simple' });
  await waitForStatus(app(), tenant.key, id, ['completed']);
  return id;
}

/**
 * Resolves once a statement of the app's database that contains `text`
 * waits for a lock (lockWaiter); never fails, so it can race a request
 * that may not wait at all.
 */
function lockWaited(text: string): Promise<void> {
  return lockWaiter(app().services.database.pool, text).then(
    () => undefined,
    () => undefined,
  );
}

/** Whether the tenant has a workflow in a session that no longer exists. */
async function orphans(sessionId: string): Promise<number> {
  return count(
    'SELECT count(*) FROM workflows w WHERE w.session_id = $1 AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id::text = w.session_id)',
    [sessionId],
  );
}

async function count(sql: string, values: unknown[]): Promise<number> {
  const { rows } = await app().services.database.pool.query<{ count: string }>(sql, values);
  return Number(rows[0]?.count);
}

describe('GET /v1/sessions', () => {
  it('lists the tenant’s sessions newest first, a page at a time, and no other tenant’s', async () => {
    const tenant = await newTenant('list sessions');
    const other = await newTenant('list sessions, other');
    const ids: string[] = [];
    for (const title of ['first', 'second', 'third']) {
      ids.push(await createSession(app(), tenant.key, { title }));
    }
    await createSession(app(), other.key, { title: 'not theirs' });

    const first = await request(tenant, 'GET', '/v1/sessions?limit=2');
    expect(first.statusCode, first.body).toBe(200);
    const page = first.json();
    expect(page.items.map((session: { title: string }) => session.title)).toEqual([
      'third',
      'second',
    ]);
    expect(page.items[0]).toEqual({
      id: ids[2],
      title: 'third',
      metadata: {},
      model: null,
      lastSeq: 0,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      lastActivityAt: page.items[0].createdAt,
    });
    expect(page.nextCursor).toEqual(expect.any(String));

    const rest = await request(
      tenant,
      'GET',
      `/v1/sessions?limit=2&cursor=${encodeURIComponent(page.nextCursor)}`,
    );
    expect(rest.statusCode, rest.body).toBe(200);
    expect(rest.json()).toEqual({
      items: [expect.objectContaining({ id: ids[0] })],
      nextCursor: null,
    });
  });

  it('with metadata, lists only the sessions whose metadata contains it, paged as without', async () => {
    const tenant = await newTenant('list sessions by metadata');
    const other = await newTenant('list sessions by metadata, other');
    const mine: string[] = [];
    for (const topic of ['tax', 'travel', 'tax']) {
      mine.push(await createSession(app(), tenant.key, { metadata: { user: 'u-1', topic } }));
    }
    await createSession(app(), tenant.key, { metadata: { user: 'u-2', topic: 'tax' } });
    await createSession(app(), tenant.key);
    await createSession(app(), other.key, { metadata: { user: 'u-1', topic: 'tax' } });

    const list = async (filter: unknown, extra = '') => {
      const query = `metadata=${encodeURIComponent(JSON.stringify(filter))}${extra}`;
      const response = await request(tenant, 'GET', `/v1/sessions?${query}`);
      expect(response.statusCode, response.body).toBe(200);
      return response.json() as { items: { id: string }[]; nextCursor: string | null };
    };
    const ids = (page: { items: { id: string }[] }) => page.items.map((session) => session.id);

    expect(ids(await list({ user: 'u-1' }))).toEqual([...mine].reverse());
    expect(ids(await list({ user: 'u-1', topic: 'tax' }))).toEqual([mine[2], mine[0]]);
    expect(ids(await list({ user: 'u-3' }))).toEqual([]);
    const first = await list({ user: 'u-1' }, '&limit=2');
    expect(ids(first)).toEqual([mine[2], mine[1]]);
    const rest = await list(
      { user: 'u-1' },
      `&limit=2&cursor=${encodeURIComponent(first.nextCursor ?? '')}`,
    );
    expect(rest).toEqual({ items: [expect.objectContaining({ id: mine[0] })], nextCursor: null });
  });

  it.each([
    ['a cursor it never returned', '?cursor=bm90LWEtY3Vyc29y', 'invalid_cursor'],
    ['a limit over 100', '?limit=101', 'validation_failed'],
    ['an unknown parameter', '?status=completed', 'validation_failed'],
    ['metadata that is not JSON', '?metadata=user%3Du-1', 'validation_failed'],
    ['metadata that is a JSON array', '?metadata=%5B1%5D', 'validation_failed'],
    ['metadata that is a JSON string', '?metadata=%22u-1%22', 'validation_failed'],
    ['metadata with a NUL', '?metadata=%7B%22u%22%3A%22a%5Cu0000b%22%7D', 'validation_failed'],
  ])('%s answers 400 %s', async (_, query, code) => {
    const tenant = await newTenant(`list sessions ${code} ${query}`);
    const response = await request(tenant, 'GET', `/v1/sessions${query}`);
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json().code).toBe(code);
  });
});

describe('PATCH /v1/sessions/:id', () => {
  it('changes the fields it names and keeps the others; null removes a title or a model', async () => {
    const tenant = await newTenant('patch session');
    const id = await createSession(app(), tenant.key, {
      title: 'Draft',
      metadata: { user: 'u-1', tags: ['a'] },
      model: 'scripted',
    });
    const before = (await getSession(tenant.key, id)).json();

    const renamed = await request(tenant, 'PATCH', `/v1/sessions/${id}`, { title: 'Final' });
    expect(renamed.statusCode, renamed.body).toBe(200);
    expect(renamed.json()).toEqual({
      ...before,
      messages: undefined,
      nextAfter: undefined,
      title: 'Final',
      updatedAt: expect.any(String),
    });
    expect(Date.parse(renamed.json().updatedAt)).toBeGreaterThan(Date.parse(before.updatedAt));

    const replaced = await request(tenant, 'PATCH', `/v1/sessions/${id}`, {
      metadata: { user: 'u-2' },
      model: null,
      title: null,
    });
    expect(replaced.statusCode, replaced.body).toBe(200);
    expect(replaced.json()).toMatchObject({ title: null, metadata: { user: 'u-2' }, model: null });
    expect((await getSession(tenant.key, id)).json()).toMatchObject({
      title: null,
      metadata: { user: 'u-2' },
      model: null,
    });
  });

  it.each([
    ['no field at all', {}, 'validation_failed'],
    ['an unknown field', { name: 'x' }, 'validation_failed'],
    ['an empty title', { title: '' }, 'validation_failed'],
    ['metadata that is not an object', { metadata: 'x' }, 'validation_failed'],
    ['a model not in the catalogue', { model: 'no-such-model' }, 'unknown_model'],
  ])('%s answers 400 %s and changes nothing', async (_, payload, code) => {
    const tenant = await newTenant(`patch session ${code} ${JSON.stringify(payload)}`);
    const id = await createSession(app(), tenant.key, { title: 'Kept' });
    const before = (await getSession(tenant.key, id)).json();

    const response = await request(tenant, 'PATCH', `/v1/sessions/${id}`, payload);
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json().code).toBe(code);
    expect((await getSession(tenant.key, id)).json()).toEqual(before);
  });

  it('another tenant’s session answers 404 and is left as it was', async () => {
    const owner = await newTenant('patch session owner');
    const stranger = await newTenant('patch session stranger');
    const id = await createSession(app(), owner.key, { title: 'Mine' });

    const response = await request(stranger, 'PATCH', `/v1/sessions/${id}`, { title: 'Theirs' });
    expect(response.statusCode, response.body).toBe(404);
    expect(response.json().code).toBe('not_found');
    expect((await getSession(owner.key, id)).json().title).toBe('Mine');
  });
});

describe('DELETE /v1/sessions/:id', () => {
  it('deletes the session, its messages and its workflows with their events; the ledger keeps their calls', async () => {
    const tenant = await newTenant('delete session');
    const id = await createSession(app(), tenant.key, { title: 'Gone soon' });
    const workflows = [
      await completedIn(tenant, id, 'What is 2 + 2?'),
      await completedIn(tenant, id, 'And 3 + 3?'),
    ];
    const elsewhere = await completedIn(tenant, await createSession(app(), tenant.key), 'Kept?');
    expect(await sessionMessages(tenant.key, id)).toHaveLength(4);
    await app().services.llm.ledger.flush();
    const ledger = await count('SELECT count(*) FROM llm_calls WHERE workflow_id = ANY($1)', [
      workflows,
    ]);
    expect(ledger).toBeGreaterThan(0);

    const response = await request(tenant, 'DELETE', `/v1/sessions/${id}`);
    expect(response.statusCode, response.body).toBe(204);
    expect(response.body).toBe('');

    expect((await getSession(tenant.key, id)).statusCode).toBe(404);
    for (const workflow of workflows) {
      expect((await request(tenant, 'GET', `/v1/workflows/${workflow}`)).statusCode).toBe(404);
    }
    expect(await count('SELECT count(*) FROM session_messages WHERE session_id = $1', [id])).toBe(
      0,
    );
    expect(
      await count('SELECT count(*) FROM workflow_events WHERE workflow_id = ANY($1)', [workflows]),
    ).toBe(0);
    expect(
      await count('SELECT count(*) FROM llm_calls WHERE workflow_id = ANY($1)', [workflows]),
    ).toBe(ledger);
    expect((await request(tenant, 'GET', `/v1/workflows/${elsewhere}`)).statusCode).toBe(200);

    const again = await request(tenant, 'DELETE', `/v1/sessions/${id}`);
    expect(again.statusCode, again.body).toBe(404);
  });

  it('refuses with 409 session_has_open_workflows while a workflow of it is paused, deleting nothing; after a cancel it goes', async () => {
    const tenant = await newTenant('delete busy session');
    const id = await createSession(app(), tenant.key);
    const done = await completedIn(tenant, id, 'What is 2 + 2?');
    // A request with nothing to act on: the scripted model asks the user.
    const paused = await startWorkflow(app(), tenant.key, { input: 'help me', sessionId: id });
    await waitForStatus(app(), tenant.key, paused, ['awaiting_input']);

    const refused = await request(tenant, 'DELETE', `/v1/sessions/${id}`);
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.json()).toMatchObject({
      code: 'session_has_open_workflows',
      current: { openWorkflowIds: [paused] },
    });
    expect(await sessionMessages(tenant.key, id)).toHaveLength(2);
    expect((await request(tenant, 'GET', `/v1/workflows/${done}`)).statusCode).toBe(200);

    expect((await cancelWorkflow(app(), tenant.key, paused)).statusCode).toBe(202);
    await waitForStatus(app(), tenant.key, paused, ['cancelled']);
    const deleted = await request(tenant, 'DELETE', `/v1/sessions/${id}`);
    expect(deleted.statusCode, deleted.body).toBe(204);
    for (const workflow of [done, paused]) {
      expect((await request(tenant, 'GET', `/v1/workflows/${workflow}`)).statusCode).toBe(404);
    }
  });

  it('another tenant’s session answers 404 and keeps its messages', async () => {
    const owner = await newTenant('delete session owner');
    const stranger = await newTenant('delete session stranger');
    const id = await createSession(app(), owner.key);
    await completedIn(owner, id, 'What is 2 + 2?');

    const response = await request(stranger, 'DELETE', `/v1/sessions/${id}`);
    expect(response.statusCode, response.body).toBe(404);
    expect(await sessionMessages(owner.key, id)).toHaveLength(2);
  });

  it('a DELETE while a create in the session is inserting its workflow: 409, the workflow keeps its session', async () => {
    const tenant = await newTenant('delete racing create');
    const id = await createSession(app(), tenant.key);
    const blocker = await app().services.database.pool.connect();
    let creating: ReturnType<typeof postWorkflow>;
    let deleting: ReturnType<typeof request>;
    try {
      // Holds the create's insert (its tenant's foreign key) after it has read the session.
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE', [tenant.id]);
      // A request the scripted model answers with ask_user: the workflow stays open, paused,
      // where one that completed at once could go with the session before the delete's check.
      creating = postWorkflow(app(), tenant.key, {
        input: 'help me',
        sessionId: id,
        mode: 'simple',
      });
      await lockWaiter(app().services.database.pool, 'INSERT INTO workflows');
      deleting = request(tenant, 'DELETE', `/v1/sessions/${id}`);
      // Answered at once, or waiting for the insert to commit.
      await Promise.race([deleting, lockWaited('FROM sessions')]);
      await blocker.query('COMMIT');
    } finally {
      blocker.release();
    }
    const [created, deleted] = await Promise.all([creating, deleting]);
    expect(created.statusCode, created.body).toBe(202);
    expect(deleted.statusCode, deleted.body).toBe(409);
    expect(await orphans(id)).toBe(0);
    await waitForStatus(app(), tenant.key, created.json().id, ['awaiting_input']);
  });

  it('a create whose session is deleted before its insert: 400 unknown_session and no workflow row', async () => {
    const tenant = await newTenant('create racing delete');
    const id = await createSession(app(), tenant.key);
    const blocker = await app().services.database.pool.connect();
    let creating: ReturnType<typeof postWorkflow>;
    try {
      // The session's delete, not committed yet: the create still reads the session.
      await blocker.query('BEGIN');
      await blocker.query('DELETE FROM sessions WHERE id = $1', [id]);
      creating = postWorkflow(app(), tenant.key, { input: 'hi', sessionId: id, mode: 'simple' });
      await Promise.race([creating, lockWaited('INSERT INTO workflows')]);
      await blocker.query('COMMIT');
    } finally {
      blocker.release();
    }
    const created = await creating;
    expect(created.statusCode, created.body).toBe(400);
    expect(created.json().code).toBe('unknown_session');
    expect(await count('SELECT count(*) FROM workflows WHERE session_id = $1', [id])).toBe(0);
  });
});
