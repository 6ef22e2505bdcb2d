import { describe, expect, it } from 'vitest';
import { MIN_OUTPUT_TOKENS } from '../../../src/llm/output-room.js';
import type { FakeResponse, RecordedRequest } from '../../fakes/provider-types.js';
import { pageText } from '../../support/tool-loop-harness.js';
import { useVendorsApp, type VendorModel } from '../../support/vendors-app.js';
import {
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * A turn that falls back to another model after an error, through the
 * real OpenAI and Anthropic SDKs against the fake provider, each vendor
 * falling back to the other. The workflow's model (`wide`: a 20,000-token
 * window, 8,000 tokens of output) falls back to models with smaller
 * windows and smaller outputs. Each attempt's request is fitted to the
 * model that receives it: its own maximum output and the room the input
 * leaves in its own window; a fallback whose window cannot hold the input
 * with the least output (MIN_OUTPUT_TOKENS) is passed over rather than
 * sent a request its provider refuses. The request was fitted once, to
 * the workflow's model, and a fallback was sent the same one: asked for
 * its whole output on top of an input that left no room for it, or sent an
 * input past its window.
 *
 * Sizes are counted in the receiving model's estimate (as in
 * output-room.test.ts), the question being text that is one o200k token
 * every 5 characters and 3.5 characters a token under the Anthropic
 * estimate; the request also carries a system prompt, so the known input
 * is a lower bound.
 */

const vendors = [
  { primary: 'ant', fallback: 'oai' },
  { primary: 'oai', fallback: 'ant' },
] as const;

const wide = { contextWindow: 20_000, maxOutputTokens: 8_000 };
const { provider, app, tenant } = useVendorsApp({
  models: vendors.flatMap(({ primary, fallback }): VendorModel[] => [
    { name: `wide-${primary}`, provider: primary, ...wide, fallbacks: [`narrow-${fallback}`] },
    {
      name: `chain-${primary}`,
      provider: primary,
      ...wide,
      fallbacks: [`tiny-${fallback}`, `roomy-${fallback}`],
    },
    { name: `alone-${primary}`, provider: primary, ...wide, fallbacks: [`tiny-${fallback}`] },
    {
      name: `cramped-${primary}`,
      provider: primary,
      contextWindow: 8_000,
      maxOutputTokens: 4_000,
      largerContext: `vast-${fallback}`,
    },
    {
      name: `vast-${fallback}`,
      provider: fallback,
      contextWindow: 100_000,
      maxOutputTokens: 6_000,
    },
    {
      name: `narrow-${fallback}`,
      provider: fallback,
      contextWindow: 8_000,
      maxOutputTokens: 4_000,
    },
    { name: `tiny-${fallback}`, provider: fallback, contextWindow: 4_000, maxOutputTokens: 2_000 },
    {
      name: `roomy-${fallback}`,
      provider: fallback,
      contextWindow: 16_000,
      maxOutputTokens: 4_000,
    },
  ]),
  defaultModel: 'wide-ant',
  tenantName: 'fallback-window',
});

const overloaded: FakeResponse = { kind: 'error', status: 529 };

/** A question of `tokens` tokens under the estimate of a model of `providerName`. */
function questionOf(providerName: string, tokens: number): string {
  const charsPerToken = providerName === 'oai' ? 5 : 3.5;
  return pageText(1, Math.round(tokens * charsPerToken));
}

/** The output a request asked for: OpenAI's `max_completion_tokens`, Anthropic's `max_tokens`. */
function maxOutputOf(request: RecordedRequest): number {
  return request.api === 'anthropic' ? request.body.max_tokens : request.body.max_completion_tokens;
}

async function run(model: string, input: string) {
  const before = provider().requests.length;
  const id = await startWorkflow(app(), tenant().key, { input, mode: 'simple', model });
  const workflow = await waitForStatus(app(), tenant().key, id, ['completed', 'failed']);
  const requests = provider().requests.slice(before);
  return { workflow, requests, events: await storedEvents(app(), id) };
}

function fallbacks(events: StoredEvent[]): unknown[] {
  return events
    .filter((event) => event.type === 'llm_fallback')
    .map(({ detail }) => [detail.from, detail.to, detail.reason]);
}

function endedCalls(events: StoredEvent[]): unknown[] {
  return events
    .filter((event) => event.type === 'llm_call' && event.status !== 'started')
    .map((event) => [event.status, event.detail.model]);
}

describe.each(vendors)('a fallback from $primary to $fallback', ({ primary, fallback }) => {
  it('is asked for no more than its own maximum output and the room the input leaves in its own window', async () => {
    // 4,500 tokens: 8,000 tokens of window leave room for about 3,000 of output, not 4,000.
    const input = 4_500;
    provider().enqueue(overloaded, { kind: 'reply', text: 'Answered by the fallback.' });
    const { workflow, requests, events } = await run(
      `wide-${primary}`,
      questionOf(fallback, input),
    );
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answered by the fallback.' },
    });
    expect(requests.map((request) => request.body.model)).toEqual([
      `wide-${primary}-id`,
      `narrow-${fallback}-id`,
    ]);
    const [first, second] = requests as [RecordedRequest, RecordedRequest];
    // The workflow's model: its whole output, which its window has room for.
    expect(maxOutputOf(first)).toBe(8_000);
    const asked = maxOutputOf(second);
    expect(asked).toBeLessThanOrEqual(4_000);
    expect(asked).toBeGreaterThanOrEqual(MIN_OUTPUT_TOKENS);
    expect(input + asked).toBeLessThanOrEqual(8_000);
    // The turn is the fallback's, reported and priced as such.
    expect(endedCalls(events)).toEqual([['completed', `narrow-${fallback}`]]);
  });

  it('whose window cannot hold the input is passed over for the next one that can', async () => {
    // 5,000 tokens: past tiny's 4,000-token window, within roomy's 16,000.
    const input = 5_000;
    provider().enqueue(overloaded, { kind: 'reply', text: 'Answered by roomy.' });
    const { workflow, requests, events } = await run(
      `chain-${primary}`,
      questionOf(fallback, input),
    );
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answered by roomy.' },
    });
    expect(requests.map((request) => request.body.model)).toEqual([
      `chain-${primary}-id`,
      `roomy-${fallback}-id`,
    ]);
    expect(input + maxOutputOf(requests[1] as RecordedRequest)).toBeLessThanOrEqual(16_000);
    expect(fallbacks(events)).toEqual([
      [`chain-${primary}`, `tiny-${fallback}`, 'error'],
      [`tiny-${fallback}`, `roomy-${fallback}`, 'context_window'],
    ]);
    expect(endedCalls(events)).toEqual([['completed', `roomy-${fallback}`]]);
  });

  it('whose window cannot hold the input, the last of the chain, is not sent it: the turn fails with the error it fell back from', async () => {
    provider().enqueue(overloaded);
    const { workflow, requests, events } = await run(
      `alone-${primary}`,
      questionOf(fallback, 5_000),
    );
    expect(provider().pendingResponses()).toBe(0);
    expect(requests.map((request) => request.body.model)).toEqual([`alone-${primary}-id`]);
    expect(workflow).toMatchObject({ status: 'failed', error: { code: 'llm_overloaded' } });
    expect(endedCalls(events)).toEqual([['failed', `alone-${primary}`]]);
  });

  it('the larger-context model a context-length refusal moves to asks for its own output, not the room the refused model had', async () => {
    // 5,000 tokens of cramped's 8,000: room for about 2,000 of its 4,000.
    const input = 5_000;
    provider().enqueue(
      { kind: 'error', status: 400, type: 'context_length' },
      { kind: 'reply', text: 'Answered by vast.' },
    );
    const { workflow, requests, events } = await run(
      `cramped-${primary}`,
      questionOf(primary, input),
    );
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Answered by vast.' },
    });
    const [refused, larger] = requests as [RecordedRequest, RecordedRequest];
    expect(input + maxOutputOf(refused)).toBeLessThanOrEqual(8_000);
    expect(larger.body.model).toBe(`vast-${fallback}-id`);
    expect(maxOutputOf(larger)).toBe(6_000);
    expect(fallbacks(events)).toEqual([
      [`cramped-${primary}`, `vast-${fallback}`, 'context_length'],
    ]);
    expect(endedCalls(events)).toEqual([['completed', `vast-${fallback}`]]);
  });
});
