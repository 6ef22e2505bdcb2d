import { beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/app.js';
import {
  createSession,
  startWorkflow,
  type TestTenant,
  useScriptedApp,
  waitForStatus,
} from '../support/workflows.js';

/** `GET /v1/workflows`: keyset pages newest first, filters, cursors. */

const { app, newTenant } = useScriptedApp();

describe('listing', () => {
  let tenant: TestTenant;
  let s1: string;
  let s2: string;
  const session1: string[] = [];
  const session2: string[] = [];

  beforeAll(async () => {
    tenant = await newTenant('listing');
    s1 = await createSession(app(), tenant.key);
    s2 = await createSession(app(), tenant.key);
    // Created one by one so that creation order is newest-last.
    for (let index = 0; index < 7; index++) {
      session1.push(
        await startWorkflow(app(), tenant.key, { input: `s1 #${index}`, sessionId: s1 }),
      );
    }
    for (let index = 0; index < 3; index++) {
      session2.push(
        await startWorkflow(app(), tenant.key, { input: `s2 #${index}`, sessionId: s2 }),
      );
    }
    for (const id of [...session1, ...session2]) {
      await waitForStatus(app(), tenant.key, id, ['completed']);
    }
  });

  async function list(query: string, key = tenant.key) {
    const response = await app().app.inject({
      method: 'GET',
      url: `/v1/workflows?${query}`,
      headers: bearer(key),
    });
    expect(response.statusCode, response.body).toBe(200);
    return response.json() as {
      items: { id: string; status: string }[];
      nextCursor: string | null;
    };
  }

  async function listAll(query: string): Promise<string[][]> {
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const page = await list(`${query}${cursor ? `&cursor=${cursor}` : ''}`);
      pages.push(page.items.map((item) => item.id));
      cursor = page.nextCursor;
    } while (cursor);
    return pages;
  }

  it('pages through a session newest first, with no duplicate and no gap', async () => {
    const pages = await listAll(`sessionId=${s1}&limit=3`);
    expect(pages.map((page) => page.length)).toEqual([3, 3, 1]);
    expect(pages.flat()).toEqual([...session1].reverse());
  });

  it('a limit equal to the count ends with a null cursor and no empty page', async () => {
    const pages = await listAll(`sessionId=${s2}&limit=3`);
    expect(pages).toEqual([[...session2].reverse()]);
  });

  it('without filters lists every workflow of the tenant, and only those', async () => {
    const other = await newTenant('listing other');
    const theirs = await createSession(app(), other.key);
    await startWorkflow(app(), other.key, { input: 'not yours', sessionId: theirs });
    const pages = await listAll('limit=4');
    expect(pages.flat()).toEqual([...session1, ...session2].reverse());
    expect((await list('', other.key)).items).toHaveLength(1);
  });

  it('rows created meanwhile do not shift the pages after the cursor', async () => {
    const first = await list(`sessionId=${s1}&limit=2`);
    await startWorkflow(app(), tenant.key, { input: 'late', sessionId: s1 });
    const second = await list(`sessionId=${s1}&limit=2&cursor=${first.nextCursor}`);
    expect(second.items.map((item) => item.id)).toEqual([...session1].reverse().slice(2, 4));
  });

  it('filters by status', async () => {
    expect((await list(`status=completed&sessionId=${s2}`)).items).toHaveLength(3);
    expect((await list('status=failed')).items).toEqual([]);
  });

  it('a cursor it did not make, a bad status or limit answer 400', async () => {
    for (const query of ['cursor=not-a-cursor', 'status=sleeping', 'limit=0', 'limit=101']) {
      const response = await app().app.inject({
        method: 'GET',
        url: `/v1/workflows?${query}`,
        headers: bearer(tenant.key),
      });
      expect(response.statusCode, query).toBe(400);
    }
    const forged = Buffer.from('123.not-a-uuid').toString('base64url');
    const response = await app().app.inject({
      method: 'GET',
      url: `/v1/workflows?cursor=${forged}`,
      headers: bearer(tenant.key),
    });
    expect(response.json().code).toBe('invalid_cursor');
  });
});
