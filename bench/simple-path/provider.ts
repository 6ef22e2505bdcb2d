import { startFakeProviderServer } from '../../test/fakes/provider-server.js';
import type {
  FakeProviderServer,
  FakeResponse,
  RecordedRequest,
} from '../../test/fakes/provider-types.js';
import { messagesOf } from '../support/fake-catalogue.js';

/**
 * The model side of bench/simple-path: the fake provider server (OpenAI
 * wire format, streamed) answering every conversation with the same two
 * turns, at once: a `calculator` call, then, once the request carries the
 * tool's result, the answer, each reply in one write (`delivery: 'burst'`:
 * a fake that wrote frame by frame spent the shared cores on ~14 writes per
 * workflow that no service work needs). Each workflow asks a numbered
 * question, which is how the fake tells concurrent conversations apart and
 * how the time spent inside it is summed per workflow.
 */

/** Catalogue name of the one model the service is given (or must have, when external). */

const QUESTION = /^Bench question (\d+):/;

/** The input of workflow `n`. */
export function benchQuestion(n: number): string {
  return `Bench question ${n}: what is 6 * 7?`;
}

const TOOL_CALL: FakeResponse = {
  kind: 'reply',
  toolCalls: [{ name: 'calculator', arguments: { expression: '6 * 7' } }],
  usage: { input: 120, output: 12 },
  delivery: 'burst',
};
const ANSWER: FakeResponse = {
  kind: 'reply',
  // One chunk: the fake answers at once, with no pacing between deltas.
  chunks: ['Six times seven is 42.'],
  usage: { input: 160, output: 8 },
  delivery: 'burst',
};

/**
 * The workflow number in the request's question, or undefined for a request
 * that is not the bench's. The question is the last user message: in a
 * session (`--session-turns`), the earlier ones are its history.
 */
export function workflowNumberOf(request: RecordedRequest): number | undefined {
  const question = messagesOf(request).findLast((message) => message.role === 'user');
  const match = typeof question?.content === 'string' ? QUESTION.exec(question.content) : null;
  return match ? Number(match[1]) : undefined;
}

/** Turn one calls the calculator; a request that already holds a tool result gets the answer. */
export function answerTwoTurns(request: RecordedRequest): FakeResponse {
  return messagesOf(request).some((message) => message.role === 'tool') ? ANSWER : TOOL_CALL;
}

/** Workflow `n`'s time inside the fake, its requests being one after another. */
export interface TimeInside {
  /** Request arrival to response end, summed over its requests. */
  ms: number;
  requests: number;
  /** `performance.now()` of this thread: the first request's arrival, the last response's end. */
  firstArrivedAt: number;
  lastEndedAt: number;
  /** From each response's end to the next request's arrival, summed: the service's work between model calls. */
  betweenMs: number;
}

export interface BenchProvider {
  server: FakeProviderServer;
  timeInside(n: number): TimeInside | undefined;
  /** Requests that carried no bench question (a misconfigured run). */
  strayRequests(): number;
}

/** Starts the scripted fake; `port` 0 picks a free one. */
export async function startBenchProvider(options: {
  port: number;
  host: string;
}): Promise<BenchProvider> {
  const inside = new Map<number, TimeInside>();
  let stray = 0;
  const server = await startFakeProviderServer({
    ...options,
    respond: answerTwoTurns,
    // Tens of thousands of requests with their bodies would only grow the heap under test.
    recordRequests: false,
    onAnswered(request, span) {
      const n = workflowNumberOf(request);
      if (n === undefined) {
        stray += 1;
        return;
      }
      const sum = inside.get(n);
      if (!sum) {
        inside.set(n, {
          ms: span.endedAt - span.arrivedAt,
          requests: 1,
          firstArrivedAt: span.arrivedAt,
          lastEndedAt: span.endedAt,
          betweenMs: 0,
        });
        return;
      }
      sum.ms += span.endedAt - span.arrivedAt;
      sum.requests += 1;
      sum.betweenMs += span.arrivedAt - sum.lastEndedAt;
      sum.lastEndedAt = span.endedAt;
    },
  });
  return {
    server,
    timeInside: (n) => inside.get(n),
    strayRequests: () => stray,
  };
}
