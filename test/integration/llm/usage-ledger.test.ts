import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptRecord } from '../../../src/llm/router/types.js';
import { createUsageLedger } from '../../../src/llm/usage-ledger.js';
import { type DatabaseHandle, openDatabase } from '../../../src/store/database.js';
import { createTenancyService } from '../../../src/tenancy/service.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

let database: TestDatabase;
let handle: DatabaseHandle;
let tenantId: string;
const log = pino({ level: 'silent' });

beforeAll(async () => {
  database = await createTestDatabase();
  handle = openDatabase({ url: database.url, poolMax: 2, log });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('no tenant');
  tenantId = created.tenant.id;
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

function attempt(n: number, workflowId?: string): AttemptRecord {
  return {
    context: { tenantId, workflowId },
    model: 'primary',
    provider: 'openai',
    modelId: 'gpt-4o-mini',
    attempt: n,
    usage: { inputTokens: 100, outputTokens: 20, cachedInputTokens: 50, cacheWriteTokens: 0 },
    costUsd: 0.000_123_45,
    latencyMs: 812.4,
    ttftMs: n === 1 ? null : 101.6,
    outcome: n === 1 ? 'rate_limited' : 'ok',
    startedAt: new Date(),
  };
}

async function countRows(workflowId: string): Promise<number> {
  const { rows } = await handle.pool.query(
    'SELECT count(*)::int AS count FROM llm_calls WHERE workflow_id = $1',
    [workflowId],
  );
  return rows[0].count;
}

describe('usage ledger', () => {
  it('queues without waiting, and close() writes everything queued', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    ledger.record(attempt(1, workflowId));
    ledger.record(attempt(2, workflowId));
    expect(ledger.pending()).toBe(2);
    await ledger.close();
    expect(ledger.pending()).toBe(0);
    const { rows } = await handle.pool.query(
      'SELECT attempt, outcome, cost_usd, latency_ms, ttft_ms, cached_input_tokens FROM llm_calls WHERE workflow_id = $1 ORDER BY attempt',
      [workflowId],
    );
    expect(rows).toEqual([
      {
        attempt: 1,
        outcome: 'rate_limited',
        cost_usd: '0.00012345',
        latency_ms: 812,
        ttft_ms: null,
        cached_input_tokens: 50,
      },
      {
        attempt: 2,
        outcome: 'ok',
        cost_usd: '0.00012345',
        latency_ms: 812,
        ttft_ms: 102,
        cached_input_tokens: 50,
      },
    ]);
  });

  it('keeps rows queued when a write fails and writes them on a later flush', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    await handle.pool.query('ALTER TABLE llm_calls RENAME TO llm_calls_away');
    try {
      ledger.record(attempt(1, workflowId));
      await ledger.flush();
      expect(ledger.pending()).toBe(1);
    } finally {
      await handle.pool.query('ALTER TABLE llm_calls_away RENAME TO llm_calls');
    }
    await ledger.flush();
    expect(ledger.pending()).toBe(0);
    expect(await countRows(workflowId)).toBe(1);
    await ledger.close();
  });

  it("rowsOf(workflow).take: the workflow's queued rows leave the queue for its run's statement, which the flush then never writes; the others stay", async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    const other = crypto.randomUUID();
    const rows = ledger.rowsOf(workflowId);
    expect(rows.take()).toEqual([]);
    ledger.record(attempt(1, other));
    ledger.record(attempt(1, workflowId));
    ledger.record(attempt(2, workflowId));
    const taken = rows.take();
    expect(taken.map((row) => [row.workflow_id, row.attempt])).toEqual([
      [workflowId, 1],
      [workflowId, 2],
    ]);
    expect(rows.take()).toEqual([]);
    expect(ledger.pending()).toBe(1);
    await ledger.flush();
    expect([await countRows(workflowId), await countRows(other)]).toEqual([0, 1]);
    await ledger.close();
  });

  it("the flush leaves a workflow's rows to its run here until the run releases them; then writes them, and rowsOf's release counts each run", async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    const other = crypto.randomUUID();
    const first = ledger.rowsOf(workflowId);
    const second = ledger.rowsOf(workflowId);
    ledger.record(attempt(1, workflowId));
    ledger.record(attempt(1, other));
    await ledger.flush();
    expect([await countRows(workflowId), await countRows(other)]).toEqual([0, 1]);
    first.release();
    first.release();
    await ledger.flush();
    expect(await countRows(workflowId)).toBe(0);
    second.release();
    await ledger.flush();
    expect(await countRows(workflowId)).toBe(1);
    expect(ledger.pending()).toBe(0);
    await ledger.close();
  });

  it('close writes the rows of a workflow whose run is still here', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    ledger.rowsOf(workflowId);
    ledger.record(attempt(1, workflowId));
    await ledger.close();
    expect(await countRows(workflowId)).toBe(1);
  });

  it('giveBack: rows taken for a statement that failed are queued again, and the flush writes them', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    const rows = ledger.rowsOf(workflowId);
    ledger.record(attempt(1, workflowId));
    rows.giveBack(rows.take());
    expect(ledger.pending()).toBe(1);
    rows.release();
    await ledger.flush();
    expect(ledger.pending()).toBe(0);
    await ledger.close();
    expect(await countRows(workflowId)).toBe(1);
  });

  it("flushing: while a flush writes some of the workflow's rows, its statement waits for that write, which take cannot take them from; another workflow's does not", async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    const other = ledger.rowsOf(crypto.randomUUID());
    const lock = await handle.pool.connect();
    try {
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE llm_calls IN SHARE MODE');
      // Left by the workflow's previous run here, which released them to the flush.
      ledger.record(attempt(1, workflowId));
      const flushed = ledger.flush();
      const rows = ledger.rowsOf(workflowId);
      const writing = rows.flushing();
      expect(writing).toBeDefined();
      expect(other.flushing()).toBeUndefined();
      expect(rows.take()).toEqual([]);
      await lock.query('ROLLBACK');
      await writing;
      expect(await countRows(workflowId)).toBe(1);
      await flushed;
      expect(rows.flushing()).toBeUndefined();
    } finally {
      lock.release();
    }
    await ledger.close();
  });

  it('a write that fails leaves the batch queued, in front, for the next flush', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000, maxBatch: 2 });
    const workflowId = crypto.randomUUID();
    await handle.pool.query('ALTER TABLE llm_calls RENAME TO llm_calls_away');
    try {
      for (let n = 1; n <= 3; n++) ledger.record(attempt(n, workflowId));
      await ledger.flush();
      expect(ledger.pending()).toBe(3);
    } finally {
      await handle.pool.query('ALTER TABLE llm_calls_away RENAME TO llm_calls');
    }
    await ledger.close();
    const { rows } = await handle.pool.query(
      'SELECT attempt FROM llm_calls WHERE workflow_id = $1 ORDER BY id',
      [workflowId],
    );
    expect(rows.map((row) => row.attempt)).toEqual([1, 2, 3]);
  });

  it('writes in batches of maxBatch rows', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000, maxBatch: 10 });
    const workflowId = crypto.randomUUID();
    for (let n = 1; n <= 25; n++) ledger.record(attempt(n, workflowId));
    await ledger.close();
    expect(await countRows(workflowId)).toBe(25);
  });

  it('a row the database refuses is dropped alone: the rows before and after it are written, and it is not retried forever', async () => {
    const ledger = createUsageLedger({ db: handle.db, log, flushIntervalMs: 60_000 });
    const workflowId = crypto.randomUUID();
    const refused = attempt(2, workflowId);
    // Past the column's range, as a provider's nonsense would have been before tokenCount.
    refused.usage = { ...refused.usage, inputTokens: 3e9 };
    ledger.record(attempt(1, workflowId));
    ledger.record(refused);
    ledger.record(attempt(3, workflowId));
    await ledger.flush();
    expect(ledger.pending()).toBe(0);
    const { rows } = await handle.pool.query(
      'SELECT attempt FROM llm_calls WHERE workflow_id = $1 ORDER BY attempt',
      [workflowId],
    );
    expect(rows.map((row) => row.attempt)).toEqual([1, 3]);
    await ledger.close();
  });
});
