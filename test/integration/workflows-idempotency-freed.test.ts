import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { lockWaiter } from '../support/database.js';
import {
  postWorkflow,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/**
 * A keyed create whose insert finds the key taken reads the workflow that
 * has it (workflows/service.ts `create`). When that workflow is deleted in
 * between (the retention sweep, a session's delete), the key is free and
 * the create inserts again. The interleavings are forced with locks of the
 * test's own transactions, each wait seen in pg_stat_activity and
 * pg_locks before the next step, so nothing depends on timing.
 */

const { app, newTenant } = useScriptedApp();

const BODY = { input: 'What is Waymark?', mode: 'simple' };
/** The replay's read of the key (kysely's query), as pg_stat_activity shows it. */
const KEY_READ = '"idempotency_key" = ';

const clients: pg.Client[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.end()));
});

/** A connection of the test's own to the app's database, and its backend's pid. */
async function connection(): Promise<{ client: pg.Client; pid: number }> {
  const client = new pg.Client({ connectionString: app().database.url });
  clients.push(client);
  await client.connect();
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return { client, pid: rows[0]?.pid as number };
}

/**
 * A transaction that asks for `LOCK TABLE workflows IN ACCESS EXCLUSIVE
 * MODE`, tagged in a comment so that lockWaiter tells it from another:
 * granted at once when nothing holds the table, else queued behind
 * whatever holds or waits for it (and ahead of whatever asks later).
 */
async function tableLock(tag: string) {
  const { client, pid } = await connection();
  await client.query('BEGIN');
  const granted = client.query(`LOCK TABLE workflows IN ACCESS EXCLUSIVE MODE /* ${tag} */`);
  // Awaited by the test once it expects the lock; a failure shows there.
  granted.catch(() => undefined);
  return { client, pid, granted };
}

/** The backends `pid` waits for (pg_locks). */
async function blockersOf(pid: number): Promise<number[]> {
  const { rows } = await app().services.database.pool.query<{ pids: number[] }>(
    'SELECT pg_blocking_pids($1) AS pids',
    [pid],
  );
  return rows[0]?.pids ?? [];
}

/** The backend's ungranted lock: its type and mode (pg_locks). */
async function awaitedLock(pid: number) {
  const { rows } = await app().services.database.pool.query<{
    locktype: string;
    relation: string | null;
    mode: string;
  }>(
    `SELECT locktype, relation::regclass::text AS relation, mode FROM pg_locks
     WHERE pid = $1 AND NOT granted`,
    [pid],
  );
  return rows;
}

/** The workflows of the tenant under the key, by id. */
async function keyHolders(tenant: TestTenant, key: string): Promise<string[]> {
  const { rows } = await app().services.database.pool.query<{ id: string }>(
    'SELECT id FROM workflows WHERE tenant_id = $1 AND idempotency_key = $2',
    [tenant.id, key],
  );
  return rows.map((row) => row.id);
}

/** A workflow created with the key, run to its end: one the sweep or a session's delete may delete. */
async function finishedWithKey(tenant: TestTenant, key: string): Promise<string> {
  const response = await postWorkflow(app(), tenant.key, BODY, { 'idempotency-key': key });
  expect(response.statusCode, response.body).toBe(202);
  const id = response.json().id as string;
  await waitForStatus(app(), tenant.key, id, ['completed']);
  return id;
}

describe('a keyed create whose key is freed under it', () => {
  it('the workflow with the key deleted between the insert that found it and the read: a new workflow, 202', async () => {
    const tenant = await newTenant('key freed');
    const key = 'freed-once';
    const old = await finishedWithKey(tenant, key);
    const pool = app().services.database.pool;

    // A delete of that workflow in flight: the create's insert waits to see whether it commits.
    const deleting = await connection();
    await deleting.client.query('BEGIN');
    await deleting.client.query('DELETE FROM workflows WHERE id = $1', [old]);
    const creating = postWorkflow(app(), tenant.key, BODY, { 'idempotency-key': key });
    const insert = await lockWaiter(pool, 'INSERT INTO workflows');
    expect(await blockersOf(insert)).toEqual([deleting.pid]);

    // Queued behind the insert: granted once the insert's transaction ends, before the read asks.
    const sweeper = await tableLock('sweeper');
    await lockWaiter(pool, 'sweeper');
    expect((await blockersOf(sweeper.pid)).sort()).toEqual([deleting.pid, insert].sort());

    // The delete rolls back: the insert finds the key taken (23505), and the read waits behind the sweeper.
    await deleting.client.query('ROLLBACK');
    await sweeper.granted;
    const read = await lockWaiter(pool, KEY_READ);
    expect(await blockersOf(read)).toEqual([sweeper.pid]);
    expect(await awaitedLock(read)).toEqual([
      { locktype: 'relation', relation: 'workflows', mode: 'AccessShareLock' },
    ]);

    // The sweeper deletes it after all: the read finds no workflow with the key.
    const swept = await sweeper.client.query(
      'DELETE FROM workflows WHERE tenant_id = $1 AND idempotency_key = $2',
      [tenant.id, key],
    );
    expect(swept.rowCount).toBe(1);
    await sweeper.client.query('COMMIT');

    const created = await creating;
    expect(created.statusCode, created.body).toBe(202);
    expect(created.headers['idempotent-replayed']).toBeUndefined();
    const id = created.json().id as string;
    expect(id).not.toBe(old);
    expect(await keyHolders(tenant, key)).toEqual([id]);
    await waitForStatus(app(), tenant.key, id, ['completed']);

    // The key now names the new workflow: the same request again replays it.
    const again = await postWorkflow(app(), tenant.key, BODY, { 'idempotency-key': key });
    expect(again.statusCode, again.body).toBe(200);
    expect(again.json().id).toBe(id);
  });

  it('the key taken again and freed again at each of the three inserts: 409 idempotency_key_busy, nothing written', async () => {
    const tenant = await newTenant('key churned');
    const key = 'freed-thrice';
    const old = await finishedWithKey(tenant, key);
    const pool = app().services.database.pool;
    // What another create's workflow with the key looks like, for taking the key again.
    const { rows } = await pool.query<{ row: object }>(
      'SELECT to_jsonb(w) AS row FROM workflows w WHERE id = $1',
      [old],
    );
    const template = rows[0]?.row;

    // Each step holds the table while the create's next statement queues behind it, and the
    // step after it queues behind that statement: they go strictly in turn.
    let holder = await tableLock('step 0');
    await holder.granted;
    const creating = postWorkflow(app(), tenant.key, BODY, { 'idempotency-key': key });
    // The create answering before its third insert has failed is a failure of its own.
    const answeredEarly = creating.then((response) => {
      throw new Error(`the create answered early: ${response.statusCode} ${response.body}`);
    });
    for (let insert = 1; insert <= 3; insert += 1) {
      const inserting = await Promise.race([
        lockWaiter(pool, 'INSERT INTO workflows'),
        answeredEarly,
      ]);
      expect(await blockersOf(inserting)).toEqual([holder.pid]);
      const freer = await tableLock(`step ${insert}a`);
      await lockWaiter(pool, `step ${insert}a`);
      if (insert > 1) {
        // Another create's workflow takes the key (it ended at once, so a delete may take it).
        await holder.client.query(
          `INSERT INTO workflows SELECT * FROM jsonb_populate_record(null::workflows,
             $1::jsonb || jsonb_build_object('id', gen_random_uuid()))`,
          [template],
        );
      }
      await holder.client.query('COMMIT');
      // The insert found the key taken; its read waits behind the freer.
      await freer.granted;
      const read = await lockWaiter(pool, KEY_READ);
      expect(await blockersOf(read)).toEqual([freer.pid]);
      const next = insert < 3 ? await tableLock(`step ${insert}b`) : undefined;
      if (next) await lockWaiter(pool, `step ${insert}b`);
      const freed = await freer.client.query(
        'DELETE FROM workflows WHERE tenant_id = $1 AND idempotency_key = $2',
        [tenant.id, key],
      );
      expect(freed.rowCount).toBe(1);
      await freer.client.query('COMMIT');
      if (next) {
        // The read found nothing and ended; the next insert queues behind this step.
        await next.granted;
        holder = next;
      }
    }

    const created = await creating;
    expect(created.statusCode, created.body).toBe(409);
    expect(created.json().code).toBe('idempotency_key_busy');
    expect(created.headers['retry-after']).toBe('1');
    const { rows: left } = await pool.query<{ count: string }>(
      'SELECT count(*) AS count FROM workflows WHERE tenant_id = $1',
      [tenant.id],
    );
    expect(Number(left[0]?.count)).toBe(0);

    // The key is free: the same request again makes its workflow.
    const again = await postWorkflow(app(), tenant.key, BODY, { 'idempotency-key': key });
    expect(again.statusCode, again.body).toBe(202);
    await waitForStatus(app(), tenant.key, again.json().id, ['completed']);
  });
});
