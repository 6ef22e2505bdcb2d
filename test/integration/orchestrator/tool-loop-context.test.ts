import { beforeAll, describe, expect, it } from 'vitest';
import { WRAP_UP_INSTRUCTION } from '../../../src/orchestrator/tool-loop/context-window.js';
import { PARTIAL_ANSWER_TEXT } from '../../../src/orchestrator/tool-loop/prepare-request.js';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import {
  answer,
  callsTo,
  pageText,
  systemTextOf,
  toolCallIdsOf,
  toolResultsOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';

/**
 * The tool loop's context-window handling end to end: the real OpenAI and
 * Anthropic SDKs against the fake provider server, asserting on the request
 * bodies the fake received. The models get a 10,000-token window and each
 * tool result is a page sized as a share of it, so a few turns cross the
 * thresholds: the wrap-up instruction at 70%, condensed earlier results at
 * 80%, and after a context-length error a retry condensed below 60%.
 *
 * Sizes are picked with margins around the thresholds rather than derived
 * from the constants, so moving a threshold makes these tests fail. The
 * system prompt, the one tool's definition and the question take about 4–5%
 * of the window and each exchange about 0.7% on top of its page; with pages
 * of 23% the requests reach about 4%, 28%, 52%, 75% and 99%; with pages of
 * 19.5% they reach about 4%, 25%, 45% and 65%.
 */

const CONTEXT_WINDOW = 10_000;

const h = useToolLoopHarness({ contextWindow: CONTEXT_WINDOW, maxIterations: 10 });
let pages: string;
beforeAll(async () => {
  // A cap above the turns these tests take: its last turn's instruction would replace the wrap-up one.
  pages = await h.registerTool('/pages', {
    parameters: {
      type: 'object',
      properties: { page: { type: 'integer' }, chars: { type: 'integer' } },
      required: ['page', 'chars'],
    },
  });
});

/**
 * Characters of a page worth `share` of the window under the model's
 * estimate: OpenAI counts o200k tokens, one per ` data`; Anthropic's
 * estimate is 3.5 characters a token.
 */
function charsFor(model: string, share: number): number {
  const charsPerToken = model === 'gpt' ? 5 : 3.5;
  return Math.round(share * CONTEXT_WINDOW * charsPerToken);
}

/** The arguments of one call to the pages tool. */
interface Page {
  page: number;
  chars: number;
}

/**
 * Enqueues one turn per share, each calling the pages tool for the next
 * page, of that share of the window; `texts` are what the model says in
 * those turns besides the call.
 */
function enqueuePageTurns(model: string, shares: number[], texts: string[] = []): Page[] {
  const calls = shares.map((share, index) => ({ page: index + 1, chars: charsFor(model, share) }));
  h.provider.enqueue(
    ...calls.map((args, index) => ({
      ...callsTo({ name: pages, arguments: args }),
      ...(texts[index] ? { text: texts[index] } : {}),
    })),
  );
  return calls;
}

/** Runs a workflow offered only the pages tool; every enqueued response must have been asked for. */
async function run(model: string) {
  const result = await h.run('Read the pages and sum them up.', model, { tools: [pages] });
  expect(h.provider.pendingResponses()).toBe(0);
  return result;
}

const CONDENSED_LINE = /^\[condensed earlier result\] \S+ returned \d+ characters: page \d+: data/;

/** The result carries the whole page, not a condensed line. */
function isWhole(content: string | undefined, page: Page | undefined): boolean {
  if (content === undefined || page === undefined) return false;
  return content.includes(pageText(page.page, page.chars));
}

function warningCodes(events: { type: string; detail: Record<string, unknown> }[]): unknown[] {
  return events.filter((event) => event.type === 'warning').map((event) => event.detail.code);
}

describe.each(['gpt', 'claude'])('the context window of the tool loop on %s', (model) => {
  it('the wrap-up instruction first reaches the model in the request past 70% of the window, and stays', async () => {
    enqueuePageTurns(model, [0.23, 0.23, 0.23, 0.23]);
    h.provider.enqueue(answer('The pages are all data.'));
    const { workflow, events, requests } = await run(model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'The pages are all data.' },
    });
    // About 4%, 28%, 52%, 75% and 99% of the window.
    expect(requests).toHaveLength(5);
    expect(requests.map((request) => systemTextOf(request).includes(WRAP_UP_INSTRUCTION))).toEqual([
      false,
      false,
      false,
      true,
      true,
    ]);
    const wrapUps = events.filter(
      (event) => event.type === 'warning' && event.detail.code === 'context_wrap_up',
    );
    expect(wrapUps).toHaveLength(1);
  });

  it('past 80% of the window earlier tool results arrive condensed to one line each; the latest stays whole', async () => {
    const calls = enqueuePageTurns(model, [0.23, 0.23, 0.23, 0.23]);
    h.provider.enqueue(answer('The pages are all data.'));
    const { workflow, events, requests } = await run(model);
    expect(workflow.status).toBe('completed');
    const [fourth, fifth] = requests.slice(3) as [RecordedRequest, RecordedRequest];

    // At about 75% nothing is condensed yet.
    const beforeThreshold = toolResultsOf(fourth);
    expect(beforeThreshold.map((result, index) => isWhole(result.content, calls[index]))).toEqual([
      true,
      true,
      true,
    ]);

    // At about 99% the oldest results are condensed until the request is back under 70%.
    const results = toolResultsOf(fifth);
    expect(results.map((result, index) => isWhole(result.content, calls[index]))).toEqual([
      false,
      false,
      true,
      true,
    ]);
    for (const [index, result] of results.slice(0, 2).entries()) {
      expect(result.content).toMatch(CONDENSED_LINE);
      expect(result.content).toContain(`page ${index + 1}:`);
      expect(result.content).not.toContain('\n');
      expect(result.content.length).toBeLessThan(200);
    }
    // Every call keeps its result: nothing in the history is left dangling.
    expect(results.map((result) => result.callId)).toEqual(toolCallIdsOf(fifth));

    const condensed = events.filter(
      (event) => event.type === 'warning' && event.detail.code === 'context_condensed',
    );
    expect(condensed.map((event) => event.detail.condensed)).toEqual([2]);
  });

  it('a request jumping from under 70% to past 80% in one turn is condensed and also carries the wrap-up instruction', async () => {
    // Requests at about 4%, 28%, 52%, then ~97% before condensing.
    enqueuePageTurns(model, [0.23, 0.23, 0.45]);
    h.provider.enqueue(answer('Done.'));
    const { events, requests } = await run(model);
    expect(warningCodes(events)).toEqual(['context_condensed', 'context_wrap_up']);
    expect(requests.map((request) => systemTextOf(request).includes(WRAP_UP_INSTRUCTION))).toEqual([
      false,
      false,
      false,
      true,
    ]);
  });

  it('a context-length error: the turn is retried once with earlier results condensed below 60% of the window', async () => {
    const calls = enqueuePageTurns(model, [0.195, 0.195, 0.195]);
    h.provider.enqueue(
      { kind: 'error', status: 400, type: 'context_length' },
      answer('Three pages of data.'),
    );
    const { workflow, events, requests } = await run(model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Three pages of data.' },
    });
    expect(requests).toHaveLength(5);
    const [overflowed, retried] = requests.slice(3) as [RecordedRequest, RecordedRequest];

    // At about 65% the request went out whole and without the wrap-up instruction.
    expect(
      toolResultsOf(overflowed).map((result, index) => isWhole(result.content, calls[index])),
    ).toEqual([true, true, true]);
    expect(systemTextOf(overflowed)).not.toContain(WRAP_UP_INSTRUCTION);

    // Condensing the oldest page brings it to about 45%: the other two stay whole.
    const results = toolResultsOf(retried);
    expect(results.map((result, index) => isWhole(result.content, calls[index]))).toEqual([
      false,
      true,
      true,
    ]);
    expect(results[0]?.content).toMatch(CONDENSED_LINE);
    expect(results.map((result) => result.callId)).toEqual(toolCallIdsOf(retried));

    const recovery = events.find(
      (event) => event.type === 'warning' && event.detail.code === 'context_length_recovery',
    );
    expect(recovery?.detail.condensed).toBe(1);
    // The retry is the same turn again.
    expect(
      events
        .filter((event) => event.type === 'llm_call')
        .slice(-3)
        .map((event) => [event.step, event.status]),
    ).toEqual([
      ['turn-4', 'failed'],
      ['turn-4', 'started'],
      ['turn-4', 'completed'],
    ]);
    expect(warningCodes(events)).toEqual(['context_length_recovery']);
  });

  it('a second context-length error ends the workflow with the model’s last words as a partial answer, without a third try', async () => {
    enqueuePageTurns(model, [0.195, 0.195, 0.195], ['', '', 'Pages 1 and 2 are all data.']);
    h.provider.enqueue(
      { kind: 'error', status: 400, type: 'context_length' },
      { kind: 'error', status: 400, type: 'context_length' },
    );
    const { workflow, events, requests } = await run(model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Pages 1 and 2 are all data.' },
    });
    expect(requests).toHaveLength(5);
    expect(warningCodes(events)).toEqual(['context_length_recovery', 'context_exhausted']);
    expect(events.find((event) => event.type === 'answer')?.detail).toMatchObject({
      text: 'Pages 1 and 2 are all data.',
    });
  });

  it('a second context-length error with no words from the model yet: the answer says it is incomplete', async () => {
    enqueuePageTurns(model, [0.195, 0.195, 0.195]);
    h.provider.enqueue(
      { kind: 'error', status: 400, type: 'context_length' },
      { kind: 'error', status: 400, type: 'context_length' },
    );
    const { workflow, events } = await run(model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: PARTIAL_ANSWER_TEXT },
    });
    expect(warningCodes(events)).toEqual(['context_length_recovery', 'context_exhausted']);
  });

  it('a context-length error on a later turn, after a recovery that worked, is recovered from again', async () => {
    enqueuePageTurns(model, [0.195, 0.195, 0.195]);
    h.provider.enqueue({ kind: 'error', status: 400, type: 'context_length' });
    // The retry of turn 4 works and reads one more page; turn 5's error is a new one.
    h.provider.enqueue(
      callsTo({ name: pages, arguments: { page: 4, chars: charsFor(model, 0.05) } }),
      { kind: 'error', status: 400, type: 'context_length' },
      answer('All four pages.'),
    );
    const { workflow, events } = await run(model);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'All four pages.', reason: 'answered' },
    });
    expect(warningCodes(events)).toEqual(['context_length_recovery', 'context_length_recovery']);
  });
});

describe('the context window of the tool loop on claude: the other context-length 400', () => {
  it('input plus max_tokens past the window is recovered from like a prompt too long', async () => {
    // The prompt fits, the prompt and the output asked for do not: Anthropic's 400 when
    // the estimate of the input fell short of its count (llm/output-room.ts).
    enqueuePageTurns('claude', [0.195, 0.195, 0.195]);
    h.provider.enqueue(
      {
        kind: 'error',
        status: 400,
        body: {
          type: 'error',
          error: {
            type: 'invalid_request_error',
            message:
              'input length and `max_tokens` exceed context limit: 6500 + 4096 > 10000, decrease input length or `max_tokens` and try again',
          },
        },
      },
      answer('Three pages of data.'),
    );
    const { workflow, events, requests } = await run('claude');
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'Three pages of data.' },
    });
    expect(requests).toHaveLength(5);
    expect(toolResultsOf(requests[4] as RecordedRequest)[0]?.content).toMatch(CONDENSED_LINE);
    expect(warningCodes(events)).toEqual(['context_length_recovery']);
  });
});
