import { PLAN_MARKER } from '../../src/llm/scripted/markers.js';
import { startFakeProviderServer } from '../../test/fakes/provider-server.js';
import type {
  FakeProviderServer,
  FakeResponse,
  RecordedRequest,
} from '../../test/fakes/provider-types.js';
import { messagesOf, type OpenAiMessage } from '../support/fake-catalogue.js';

/**
 * The model side of bench/pipeline: the fake provider server (OpenAI wire
 * format, streamed) answering at once. A planning request (its system
 * prompt carries the planner's marker line) gets the plan its question asks
 * for; every other request (a stage's turn, the synthesis) gets a short
 * text answer, which passes the validator of a `text` stage. The question
 * says the plan's size and where its checkpoint is, so workflows of
 * different sizes can share one fake.
 */

/** Catalogue name of the one model the service is given. */

const QUESTION = /^Bench pipeline (\d+): (\d+) stages, checkpoint at (\d+)\b/;

export interface PlanShape {
  stages: number;
  /** 1-based stage that pauses for review; 0 for none. */
  checkpointAt: number;
}

/** The input of workflow `n` with a plan of that shape. */
export function benchQuestion(n: number, shape: PlanShape): string {
  return `Bench pipeline ${n}: ${shape.stages} stages, checkpoint at ${shape.checkpointAt}. Compare the options.`;
}

/**
 * Stage ids of one width (`stage-001`), so a stage of a 200-stage plan
 * stores as many bytes as one of a 10-stage plan: what grows with the plan
 * is then the number of stages, not the length of their names.
 */
export function stageId(index: number): string {
  return `stage-${String(index + 1).padStart(3, '0')}`;
}

/**
 * Words the stage titles and goals are drawn from. Identical goals would
 * let PostgreSQL compress a long plan to almost nothing (it compresses a
 * value over ~2 kB), which a real plan never allows; drawn words compress
 * about as well as prose.
 */
const WORDS = (
  'price latency vendor region contract support market share revenue risk audit policy ' +
  'benchmark customer churn forecast supplier quality margin compliance roadmap feature ' +
  'adoption pricing tier discount renewal incident outage capacity storage network budget ' +
  'hiring training security review legal privacy retention growth segment channel partner ' +
  'survey feedback rating trend quarter baseline target estimate source evidence summary'
).split(' ');

/** A deterministic pseudo-random generator (mulberry32), so every run stores the same bytes. */
function randomFrom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function words(random: () => number, count: number): string {
  return Array.from({ length: count }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
}

/** The plan of `shape`: stage k is the same in every plan (same id, title and goal). */
export function planOf(shape: PlanShape): { stages: Record<string, unknown>[] } {
  return {
    stages: Array.from({ length: shape.stages }, (_, index) => {
      const random = randomFrom(index + 1);
      return {
        id: stageId(index),
        title: `Compare ${words(random, 3)}`,
        goal: `Find the ${words(random, 8)} of each option and state the ${words(random, 6)} in two sentences.`,
        checkpoint: index + 1 === shape.checkpointAt,
        expectedOutput: { format: 'text' },
      };
    }),
  };
}

const ANSWER: FakeResponse = {
  kind: 'reply',
  // One chunk: the fake answers at once, with no pacing between deltas.
  chunks: ['The facts of this step, stated in two sentences. Nothing else is needed.'],
  usage: { input: 400, output: 20 },
};

/** A message's text: a string, or the text parts of an array of parts. */
function textOf(message: OpenAiMessage | undefined): string {
  const content = message?.content;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: unknown) => {
      const text = (part as { text?: unknown } | null)?.text;
      return typeof text === 'string' ? text : '';
    })
    .join('\n');
}

function isPlanning(request: RecordedRequest): boolean {
  return messagesOf(request).some(
    (message) => message.role === 'system' && textOf(message).includes(PLAN_MARKER),
  );
}

/** The plan shape a planning request's question asks for; undefined when it is not the bench's. */
function askedShape(request: RecordedRequest): PlanShape | undefined {
  const question = textOf(messagesOf(request).find((message) => message.role === 'user'));
  const match = QUESTION.exec(question);
  return match ? { stages: Number(match[2]), checkpointAt: Number(match[3]) } : undefined;
}

export interface BenchProvider {
  server: FakeProviderServer;
  /** Planning requests whose question was not the bench's (a misconfigured run). */
  strayPlans(): number;
}

export async function startBenchProvider(): Promise<BenchProvider> {
  let stray = 0;
  const server = await startFakeProviderServer({
    // Thousands of requests with their bodies (a 200-stage plan in each later prompt) would only grow the heap.
    recordRequests: false,
    respond(request) {
      if (!isPlanning(request)) return ANSWER;
      const shape = askedShape(request);
      if (!shape) {
        stray += 1;
        return { kind: 'error', status: 400, type: 'invalid_request' };
      }
      return {
        kind: 'reply',
        chunks: [JSON.stringify(planOf(shape))],
        usage: { input: 900, output: 60 * shape.stages },
      };
    },
  });
  return { server, strayPlans: () => stray };
}
