import { describe, expect, it } from 'vitest';
import type { FakeResponse } from '../../fakes/provider-types.js';
import { stage } from '../../support/pipeline-http.js';
import { useVendorsApp } from '../../support/vendors-app.js';
import {
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitFor,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A workflow on `claude` (Anthropic), whose catalogue entry falls back to
 * `gpt` (OpenAI), at prices a thousand times apart. A fallback answers one
 * turn only: the next turn routes from `claude` again. Each turn's
 * `llm_call`, its price and its persisted state name the model that
 * answered it; a fallback used to stick to the run, so every turn after it
 * was reported and priced as the fallback's.
 */

/** Every reply: 1,000 input tokens, $0.001 at claude's $1 per million, $1 at gpt's $1,000. */
const usage = { input: 1000, output: 0 };
const CLAUDE_TURN_USD = 0.001;
const GPT_TURN_USD = 1;

const pricedAt = (price: number) => ({ input: price, output: price, cachedInput: price });
const { provider, app, tenant } = useVendorsApp({
  models: [
    { name: 'claude', provider: 'ant', pricing: pricedAt(1), fallbacks: ['gpt'] },
    { name: 'gpt', provider: 'oai', pricing: pricedAt(1000) },
  ],
  defaultModel: 'claude',
  tenantName: 'fallback',
});

const overloaded: FakeResponse = { kind: 'error', status: 529 };
const reply = (text: string): FakeResponse => ({ kind: 'reply', text, usage });

/** Each `llm_call` of a status as [step, model, cost]. */
function calls(events: StoredEvent[], status: string): [string | null, unknown, unknown][] {
  return events
    .filter((event) => event.type === 'llm_call' && event.status === status)
    .map((event) => [
      event.step,
      event.detail.model,
      (event.detail.usage as { costUsd: number } | undefined)?.costUsd,
    ]);
}

/** The usage ledger's attempts of a workflow, in order, once `count` are written (it queues). */
async function ledger(workflowId: string, count: number) {
  return waitFor(async () => {
    const { rows } = await app().services.database.pool.query<{ model: string; outcome: string }>(
      'SELECT model, outcome FROM llm_calls WHERE workflow_id = $1 ORDER BY started_at, attempt',
      [workflowId],
    );
    return rows.length >= count ? rows.map((row) => [row.model, row.outcome]) : undefined;
  }, `${count} ledger rows`);
}

describe('a fallback answers its own turn only', () => {
  it('tool loop: the next turn, answered by claude again, is reported, priced and stored as claude’s', async () => {
    provider().enqueue(
      overloaded,
      {
        kind: 'reply',
        toolCalls: [{ name: 'calculator', arguments: { expression: '1 + 1' } }],
        usage,
      },
      reply('It is 2.'),
    );
    const before = provider().requests.length;
    const id = await startWorkflow(app(), tenant().key, {
      input: 'What is 1 + 1?',
      mode: 'simple',
      model: 'claude',
      tools: ['calculator'],
    });
    const workflow = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'It is 2.' } });
    expect(
      provider()
        .requests.slice(before)
        .map((request) => request.api),
    ).toEqual(['anthropic', 'openai', 'anthropic']);
    const events = await storedEvents(app(), id);
    // Started: the model asked; the end: the one that answered, at its prices.
    expect(calls(events, 'started').map(([step, model]) => [step, model])).toEqual([
      ['turn-1', 'claude'],
      ['turn-2', 'claude'],
    ]);
    expect(calls(events, 'completed')).toEqual([
      ['turn-1', 'gpt', GPT_TURN_USD],
      ['turn-2', 'claude', CLAUDE_TURN_USD],
    ]);
    const { rows: turns } = await app().services.database.pool.query<{
      turn: number;
      model: string;
    }>(
      "SELECT turn, state->>'model' AS model FROM workflow_turns WHERE workflow_id = $1 ORDER BY turn",
      [id],
    );
    expect(turns.map((turn) => [turn.turn, turn.model])).toEqual([
      [1, 'gpt'],
      [2, 'claude'],
    ]);
    // The workflow's usage: the sum of its turns, each at its own model's prices.
    const usageEvent = events.find((event) => event.type === 'usage');
    expect(usageEvent?.detail.model).toBe('claude');
    expect(usageEvent?.detail.costUsd).toBeCloseTo(GPT_TURN_USD + CLAUDE_TURN_USD, 9);
    expect(await ledger(id, 3)).toEqual([
      ['claude', 'overloaded'],
      ['gpt', 'ok'],
      ['claude', 'ok'],
    ]);
  });

  it('pipeline: after the planner fell back, the stage and the synthesis answered by claude are claude’s', async () => {
    provider().enqueue(
      overloaded,
      reply(JSON.stringify({ stages: [stage('a')] })),
      reply('Result of a.'),
      reply('The answer.'),
    );
    const before = provider().requests.length;
    const id = await startWorkflow(app(), tenant().key, {
      input: 'Do a, then answer.',
      mode: 'complex',
      model: 'claude',
    });
    const workflow = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({ status: 'completed', result: { answer: 'The answer.' } });
    expect(
      provider()
        .requests.slice(before)
        .map((request) => request.api),
    ).toEqual(['anthropic', 'openai', 'anthropic', 'anthropic']);
    const events = await storedEvents(app(), id);
    expect(calls(events, 'completed')).toEqual([
      ['plan', 'gpt', GPT_TURN_USD],
      ['a/turn-1', 'claude', CLAUDE_TURN_USD],
      ['synthesis', 'claude', CLAUDE_TURN_USD],
    ]);
    const usageEvent = events.find((event) => event.type === 'usage');
    expect(usageEvent?.detail.costUsd).toBeCloseTo(GPT_TURN_USD + 2 * CLAUDE_TURN_USD, 9);
    expect(await ledger(id, 4)).toEqual([
      ['claude', 'overloaded'],
      ['gpt', 'ok'],
      ['claude', 'ok'],
      ['claude', 'ok'],
    ]);
  });
});
