import { describe, expect, it } from 'vitest';
import type { FakeResponse, FakeUsage } from '../../fakes/provider-types.js';
import { stage } from '../../support/pipeline-http.js';
import { useVendorsApp } from '../../support/vendors-app.js';
import {
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A model call that fails after its provider reported usage was paid for:
 * Anthropic reports a call's input tokens in `message_start`, as its
 * stream opens, so a stream that then fails (an `overloaded_error` event,
 * a stream cut before `message_stop`) has used them. Each attempt's
 * reported usage is in its ledger row, in its turn's `llm_call` and in the
 * workflow's usage, priced at the attempt's own model. A failed attempt
 * used to count nothing anywhere.
 *
 * `claude` falls back to `gpt`, at prices a thousand times apart; `haiku`
 * falls back to nothing. Every scripted reply's input is 1,000 tokens.
 */

const pricedAt = (price: number) => ({ input: price, output: price, cachedInput: price / 10 });
const { provider, app, tenant } = useVendorsApp({
  models: [
    { name: 'claude', provider: 'ant', pricing: pricedAt(1), fallbacks: ['gpt'] },
    { name: 'haiku', provider: 'ant', pricing: pricedAt(1) },
    { name: 'gpt', provider: 'oai', pricing: pricedAt(1000) },
  ],
  defaultModel: 'claude',
  tenantName: 'failed-attempts',
  env: {
    LLM_MAX_RETRIES_PER_MODEL: '1',
    LLM_BACKOFF_BASE_MS: '1',
    LLM_BACKOFF_MAX_MS: '2',
    // The tests' failures add up; an open circuit would skip the provider.
    LLM_BREAKER_THRESHOLD: '1000',
  },
});

const INPUT: FakeUsage = { input: 1000, output: 0 };
/** At $1 per million tokens: claude's and haiku's. */
const CHEAP_USD = 0.001;
/** At $1,000 per million tokens: gpt's. */
const GPT_USD = 1;

const overloadedMidStream: FakeResponse = { kind: 'stream-error', usage: INPUT };
const reply = (text: string, usage: FakeUsage = INPUT): FakeResponse => ({
  kind: 'reply',
  text,
  usage,
});

interface LedgerRow {
  model: string;
  outcome: string;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  cost_usd: string;
}

async function ledgerOf(id: string): Promise<LedgerRow[]> {
  await app().services.llm.ledger.flush();
  const { rows } = await app().services.database.pool.query<LedgerRow>(
    `SELECT model, outcome, input_tokens, output_tokens, cached_input_tokens, cost_usd
     FROM llm_calls WHERE workflow_id = $1 ORDER BY id`,
    [id],
  );
  return rows;
}

async function run(body: Record<string, unknown>) {
  const id = await startWorkflow(app(), tenant().key, { mode: 'simple', ...body });
  const workflow = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
  expect(provider().pendingResponses()).toBe(0);
  return { id, workflow, events: await storedEvents(app(), id), ledger: await ledgerOf(id) };
}

function callEnds(events: StoredEvent[]): [string | null, string, unknown][] {
  return events
    .filter((event) => event.type === 'llm_call' && event.status !== 'started')
    .map((event) => [event.step, event.status, event.detail.usage]);
}

/** The ledger's rows of a workflow summed, as its usage counts them. */
function ledgerTotals(rows: LedgerRow[]) {
  return {
    inputTokens: rows.reduce((sum, row) => sum + row.input_tokens, 0),
    outputTokens: rows.reduce((sum, row) => sum + row.output_tokens, 0),
    cachedInputTokens: rows.reduce((sum, row) => sum + row.cached_input_tokens, 0),
    costUsd: rows.reduce((sum, row) => sum + Number(row.cost_usd), 0),
  };
}

describe('usage reported before an attempt failed', () => {
  it('a stream overloaded after message_start, then retried: both attempts count', async () => {
    provider().enqueue(overloadedMidStream, reply('Answered on the retry.'));
    const { workflow, events, ledger } = await run({ input: 'Retry once', model: 'claude' });
    expect(ledger.map((row) => [row.model, row.outcome, row.input_tokens, row.cost_usd])).toEqual([
      ['claude', 'overloaded', 1000, '0.00100000'],
      ['claude', 'ok', 1000, '0.00100000'],
    ]);
    const usage = { inputTokens: 2000, outputTokens: 0, cachedInputTokens: 0 };
    expect(callEnds(events)).toEqual([
      ['turn-1', 'completed', { ...usage, costUsd: 2 * CHEAP_USD }],
    ]);
    expect(workflow).toMatchObject({ status: 'completed', usage });
    expect((workflow.usage as { costUsd: number }).costUsd).toBeCloseTo(2 * CHEAP_USD, 8);
  });

  it('the fallback answers after two mid-stream failures: each attempt is priced at its own model', async () => {
    provider().enqueue(overloadedMidStream, overloadedMidStream, reply('Answered by gpt.'));
    const { workflow, events, ledger } = await run({ input: 'Fall back', model: 'claude' });
    expect(ledger.map((row) => [row.model, row.outcome, row.cost_usd])).toEqual([
      ['claude', 'overloaded', '0.00100000'],
      ['claude', 'overloaded', '0.00100000'],
      ['gpt', 'ok', '1.00000000'],
    ]);
    const [end] = events.filter(
      (event) => event.type === 'llm_call' && event.status === 'completed',
    );
    expect(end?.detail).toMatchObject({ model: 'gpt', usage: { inputTokens: 3000 } });
    const costUsd = 2 * CHEAP_USD + GPT_USD;
    expect((end?.detail.usage as { costUsd?: number } | undefined)?.costUsd).toBeCloseTo(
      costUsd,
      8,
    );
    expect((workflow.usage as { costUsd: number }).costUsd).toBeCloseTo(costUsd, 8);
  });

  it('a turn whose streams end before message_stop fails the workflow with what they reported, cached input included', async () => {
    const cut: FakeResponse = { kind: 'cut', usage: { input: 600, output: 0, cacheRead: 400 } };
    provider().enqueue(cut, cut);
    const { workflow, events, ledger } = await run({ input: 'Cut twice', model: 'haiku' });
    expect(ledger.map((row) => [row.outcome, row.input_tokens, row.cached_input_tokens])).toEqual([
      ['stream_interrupted', 1000, 400],
      ['stream_interrupted', 1000, 400],
    ]);
    const usage = { inputTokens: 2000, outputTokens: 0, cachedInputTokens: 800 };
    expect(workflow).toMatchObject({
      status: 'failed',
      error: { code: 'llm_stream_interrupted' },
      usage,
    });
    expect(callEnds(events)).toEqual([['turn-1', 'failed', expect.objectContaining(usage)]]);
    expect(workflow.usage).toEqual(ledgerTotals(ledger));
  });

  it('pipeline: the planner’s and the synthesis’s failed attempts count, as the ledger has them', async () => {
    provider().enqueue(
      overloadedMidStream,
      reply(JSON.stringify({ stages: [stage('a')] })),
      reply('Result of a.'),
      overloadedMidStream,
      reply('The answer.'),
    );
    const { workflow, events, ledger } = await run({
      input: 'Plan, then answer',
      mode: 'complex',
      model: 'haiku',
    });
    expect(ledger.map((row) => row.outcome)).toEqual([
      'overloaded',
      'ok',
      'ok',
      'overloaded',
      'ok',
    ]);
    expect(workflow).toMatchObject({ status: 'completed', usage: { inputTokens: 5000 } });
    expect(workflow.usage).toEqual(ledgerTotals(ledger));
    expect(callEnds(events)).toEqual([
      ['plan', 'completed', expect.objectContaining({ inputTokens: 2000 })],
      ['a/turn-1', 'completed', expect.objectContaining({ inputTokens: 1000 })],
      ['synthesis', 'completed', expect.objectContaining({ inputTokens: 2000 })],
    ]);
  });
});
