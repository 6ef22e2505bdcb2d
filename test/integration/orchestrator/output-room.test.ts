import { beforeAll, describe, expect, it } from 'vitest';
import { MIN_OUTPUT_TOKENS } from '../../../src/llm/output-room.js';
import type { RecordedRequest } from '../../fakes/provider-types.js';
import { planReply, stage } from '../../support/pipeline-http.js';
import { answer, callsTo, pageText, useToolLoopHarness } from '../../support/tool-loop-harness.js';
import { startWorkflow, storedEvents, waitForStatus } from '../../support/workflows.js';

/**
 * The output a request asks for, through the real OpenAI and Anthropic SDKs
 * against the fake provider: the models have a 10,000-token window and may
 * write 5,000 tokens, so a request whose input passes half the window
 * cannot also ask for the whole output (a provider refuses input plus
 * `max_tokens` past the window: Anthropic's "input length and `max_tokens`
 * exceed context limit", OpenAI's "maximum context length is N tokens.
 * However, you requested M tokens"). Each request asks for the whole
 * output while its input leaves room for it, then for no more than the
 * room left, and never less than the floor: in the tool loop, a pipeline's
 * stages, its planner and its synthesis alike.
 *
 * The room is checked against what a request is known to carry at least
 * (its pages, its question), so the check holds under either vendor's
 * estimate; sizes are shares of the window as in tool-loop-context.test.ts.
 */

const CONTEXT_WINDOW = 10_000;
const MAX_OUTPUT = 5_000;

const h = useToolLoopHarness({
  contextWindow: CONTEXT_WINDOW,
  maxOutputTokens: MAX_OUTPUT,
  maxIterations: 10,
  // A page of 85% of the window, whole.
  env: { TOOL_OUTPUT_MAX_CHARS: '100000' },
});
let pages: string;
beforeAll(async () => {
  pages = await h.registerTool('/pages', {
    parameters: {
      type: 'object',
      properties: { page: { type: 'integer' }, chars: { type: 'integer' } },
      required: ['page', 'chars'],
    },
  });
});

/** Characters of text worth `share` of the window (a page of ` data`) under the model's estimate. */
function charsFor(model: string, share: number): number {
  const charsPerToken = model === 'gpt' ? 5 : 3.5;
  return Math.round(share * CONTEXT_WINDOW * charsPerToken);
}

/** The output a request asked for: OpenAI's `max_completion_tokens`, Anthropic's `max_tokens`. */
function maxOutputOf(request: RecordedRequest): number {
  return request.api === 'anthropic' ? request.body.max_tokens : request.body.max_completion_tokens;
}

function warningCodes(events: { type: string; detail: Record<string, unknown> }[]): unknown[] {
  return events.filter((event) => event.type === 'warning').map((event) => event.detail.code);
}

describe.each(['gpt', 'claude'])('the output a request asks for on %s', (model) => {
  it('in the tool loop: the whole output while the input leaves room, then only the room left', async () => {
    const share = 0.18;
    h.provider.enqueue(
      ...[1, 2, 3].map((page) =>
        callsTo({ name: pages, arguments: { page, chars: charsFor(model, share) } }),
      ),
      answer('Three pages of data.'),
    );
    const { workflow, events, requests } = await h.run('Read three pages.', model, {
      tools: [pages],
    });
    expect(h.provider.pendingResponses()).toBe(0);
    expect(workflow).toMatchObject({ status: 'completed', result: { reason: 'answered' } });
    // About 4%, 23%, 41% and 60% of the window: the last has no room for 5,000 more.
    expect(requests).toHaveLength(4);
    const asked = requests.map(maxOutputOf);
    expect(asked.slice(0, 3)).toEqual([MAX_OUTPUT, MAX_OUTPUT, MAX_OUTPUT]);
    const last = asked[3] as number;
    const pagesIn = 3 * share * CONTEXT_WINDOW;
    expect(last).toBeLessThan(MAX_OUTPUT);
    expect(last).toBeGreaterThanOrEqual(MIN_OUTPUT_TOKENS);
    expect(pagesIn + last).toBeLessThanOrEqual(CONTEXT_WINDOW);
    expect(warningCodes(events)).toEqual([]);
  });

  it('in a pipeline: the planner, the stage and the synthesis ask for no more than their input leaves room for', async () => {
    // A question of 60% of the window, which every request of the pipeline quotes.
    const share = 0.6;
    const question = pageText(1, charsFor(model, share));
    const before = h.provider.requests.length;
    h.provider.enqueue(planReply(stage('a')), answer('Result of a.'), answer('The answer.'));
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: question,
      mode: 'complex',
      model,
    });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', result: { answer: 'The answer.' } });
    const requests = h.provider.requests.slice(before);
    // The planner, stage a, the synthesis.
    expect(requests).toHaveLength(3);
    for (const request of requests) {
      const asked = maxOutputOf(request);
      expect(share * CONTEXT_WINDOW + asked).toBeLessThanOrEqual(CONTEXT_WINDOW);
      expect(asked).toBeGreaterThanOrEqual(MIN_OUTPUT_TOKENS);
    }
    expect(warningCodes(await storedEvents(h.testApp, id))).toEqual([]);
  });

  it('a request whose input leaves less than the floor asks for the floor, and the loop recovers from its refusal', async () => {
    // The second turn carries one page of 85% of the window, the latest result, which is
    // not condensed before the call: room for less than the floor.
    h.provider.enqueue(
      callsTo({ name: pages, arguments: { page: 1, chars: charsFor(model, 0.85) } }),
      { kind: 'error', status: 400, type: 'context_length' },
      answer('One page of data.'),
    );
    const { workflow, events, requests } = await h.run('Read one long page.', model, {
      tools: [pages],
    });
    expect(h.provider.pendingResponses()).toBe(0);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'One page of data.' },
    });
    expect(requests).toHaveLength(3);
    const [, overflowed, retried] = requests as [RecordedRequest, RecordedRequest, RecordedRequest];
    expect(maxOutputOf(overflowed)).toBe(MIN_OUTPUT_TOKENS);
    // The page condensed: room again for the whole output.
    expect(maxOutputOf(retried)).toBe(MAX_OUTPUT);
    expect(warningCodes(events)).toContain('context_length_recovery');
  });
});
