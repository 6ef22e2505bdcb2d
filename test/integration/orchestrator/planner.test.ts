import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { createLlm, type Llm } from '../../../src/llm/create-llm.js';
import { LlmError } from '../../../src/llm/errors.js';
import { PLAN_MARKER } from '../../../src/llm/scripted/markers.js';
import { DEFAULT_MAX_STAGES } from '../../../src/orchestrator/pipeline/plan.js';
import {
  PlanInvalidError,
  type PlannerOptions,
  type PlannerOutcome,
  planQuestion,
} from '../../../src/orchestrator/pipeline/planner.js';
import type { DatabaseHandle } from '../../../src/store/database.js';
import { startFakeProviderServer } from '../../fakes/provider-server.js';
import type { FakeProviderServer } from '../../fakes/provider-types.js';
import { createTenantDatabase, type TenantDatabase } from '../../support/tenant-database.js';

/**
 * The QueryPlanner through the stack the service builds (configuration ->
 * createLlm -> router -> adapter): offline the scripted model plans;
 * against the fake provider server the real OpenAI SDK carries the
 * planning turn and its repair.
 */

let testDb: TenantDatabase;
let handle: DatabaseHandle;
let tenantId: string;
let llm: Llm | undefined;
let server: FakeProviderServer | undefined;

beforeAll(async () => {
  testDb = await createTenantDatabase();
  ({ handle, tenantId } = testDb);
});
afterAll(async () => testDb?.close());
afterEach(async () => {
  await llm?.close();
  await server?.close();
  llm = undefined;
  server = undefined;
});

function startLlm(env: Record<string, string>): Llm {
  llm = createLlm({
    // The provider's key variable: loadConfig checks it is set.
    config: loadConfig({ LOG_LEVEL: 'silent', FAKE_OPENAI_KEY: 'sk-fake', ...env }),
    env: { FAKE_OPENAI_KEY: 'sk-fake' },
    db: handle.db,
    log: pino({ level: 'silent' }),
  });
  return llm;
}

async function fakeProvider(): Promise<{ llm: Llm; server: FakeProviderServer }> {
  const started = await startFakeProviderServer();
  server = started;
  const models = {
    providers: [
      { name: 'oai', kind: 'openai', baseUrl: started.openaiBaseUrl, apiKeyEnv: 'FAKE_OPENAI_KEY' },
    ],
    models: [
      {
        name: 'main',
        provider: 'oai',
        modelId: 'main-id',
        contextWindow: 8000,
        maxOutputTokens: 1024,
      },
    ],
    defaultModel: 'main',
  };
  return { llm: startLlm({ WAYMARK_MODELS: JSON.stringify(models) }), server: started };
}

function options(started: Llm, extra: Partial<PlannerOptions> = {}): PlannerOptions {
  return {
    question: 'Find the population of France, then compare it with Germany.',
    history: [],
    router: started.router,
    model: started.catalogue.defaultModel,
    costOf: () => 0,
    limits: { maxStages: DEFAULT_MAX_STAGES },
    signal: new AbortController().signal,
    context: { tenantId },
    // The turns' events go nowhere: the pipeline's tests read them.
    tracker: { enqueue: () => undefined },
    throwIfStopped: () => undefined,
    ...extra,
  };
}

const validPlan = {
  stages: [
    { id: 'gather', title: 'Gather', goal: 'Find both populations.', checkpoint: true },
    { id: 'compare', title: 'Compare', goal: 'Compare them.', dependsOn: ['gather'] },
  ],
};
/** Parses, but `compare` depends on itself and a plan needs a title per stage. */
const invalidPlan = {
  stages: [
    { id: 'gather', goal: 'Find both populations.' },
    { id: 'compare', title: 'Compare', goal: 'Compare them.', dependsOn: ['compare'] },
  ],
};

/** The outcome, which must be a plan. */
function planned(outcome: PlannerOutcome): Extract<PlannerOutcome, { status: 'planned' }> {
  if (outcome.status !== 'planned') throw new Error(`no plan: ${outcome.error.message}`);
  return outcome;
}

/** The outcome, which must be a failure. */
function failed(outcome: PlannerOutcome): Extract<PlannerOutcome, { status: 'failed' }> {
  if (outcome.status !== 'failed') throw new Error('the planner planned');
  return outcome;
}

// biome-ignore lint/suspicious/noExplicitAny: the fake server records request bodies as parsed JSON.
const messagesOf = (request: { body: any } | undefined): { role: string; content: string }[] =>
  request?.body.messages ?? [];

describe('QueryPlanner', () => {
  it('offline: the scripted model answers the planning prompt with a valid plan', async () => {
    const outcome = planned(await planQuestion(options(startLlm({}))));
    expect(outcome.repaired).toBe(false);
    expect(outcome.plan.stages.map((stage) => stage.goal)).toEqual([
      'Find the population of France.',
      'Compare it with Germany.',
    ]);
    expect(outcome.usage?.outputTokens).toBeGreaterThan(0);
  });

  it('asks for JSON with the plan marker and reads a fenced reply at once', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({
      kind: 'reply',
      text: `Here you go:\n\`\`\`json\n${JSON.stringify(validPlan)}\n\`\`\``,
    });
    const outcome = planned(await planQuestion(options(started)));
    expect(outcome).toMatchObject({
      repaired: false,
      plan: { stages: [{ id: 'gather' }, { id: 'compare' }] },
    });
    expect(fake.requests).toHaveLength(1);
    const [system, user] = messagesOf(fake.requests[0]);
    expect(String(system?.content).split('\n')).toContain(PLAN_MARKER);
    expect(user).toEqual({ role: 'user', content: options(started).question });
  });

  it('repairs an invalid plan once, quoting the validation issues to the model', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({ kind: 'reply', text: JSON.stringify(invalidPlan) });
    fake.enqueue({ kind: 'reply', text: JSON.stringify(validPlan) });
    const outcome = planned(await planQuestion(options(started)));
    expect(outcome.repaired).toBe(true);
    expect(outcome.plan.stages[1]).toMatchObject({ id: 'compare', dependsOn: ['gather'] });
    // Both turns' usage: the fake reports the same default usage for each.
    expect(outcome.usage?.inputTokens).toBeGreaterThan(0);

    expect(fake.requests).toHaveLength(2);
    const repair = messagesOf(fake.requests[1]);
    expect(repair.slice(1).map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
    expect(repair[2]?.content).toBe(JSON.stringify(invalidPlan));
    const quoted = repair[3]?.content ?? '';
    expect(quoted).toContain('That plan is invalid:');
    expect(quoted).toMatch(/- stages\[0\]\.title: /);
    expect(quoted).toContain(
      '- stages[1].dependsOn[0]: "compare" is not an earlier stage: a stage may refer to earlier stages only',
    );
  });

  it('repairs a reply that is not JSON at all', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({ kind: 'reply', text: 'I would first look up the numbers.' });
    fake.enqueue({ kind: 'reply', text: JSON.stringify(validPlan) });
    expect(planned(await planQuestion(options(started))).repaired).toBe(true);
    expect(messagesOf(fake.requests[1]).at(-1)?.content).toContain(
      '- the reply contains no JSON object',
    );
  });

  it('fails with PlanInvalidError and the issues when the repair is invalid too, after exactly two turns, counting both', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({
      kind: 'reply',
      text: JSON.stringify(invalidPlan),
      usage: { input: 100, output: 20 },
    });
    fake.enqueue({
      kind: 'reply',
      text: JSON.stringify({ stages: [] }),
      usage: { input: 300, output: 40 },
    });
    const failure = failed(
      await planQuestion(options(started, { costOf: (_, usage) => usage.inputTokens / 1000 })),
    );
    expect(failure.error).toBeInstanceOf(PlanInvalidError);
    expect(failure.error).toMatchObject({
      code: 'plan_invalid',
      status: 502,
      issues: ['stages: a plan has at least one stage'],
    });
    expect(failure.usage).toMatchObject({ inputTokens: 400, outputTokens: 60 });
    expect(failure.costUsd).toBeCloseTo(0.4, 8);
    expect(fake.requests).toHaveLength(2);
  });

  it('passes the bound on stages to the model and enforces it', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    const many = {
      stages: Array.from({ length: 3 }, (_, i) => ({ id: `s${i}`, title: 'T', goal: 'G' })),
    };
    fake.enqueue({ kind: 'reply', text: JSON.stringify(many) });
    fake.enqueue({ kind: 'reply', text: JSON.stringify(many) });
    const failure = failed(await planQuestion(options(started, { limits: { maxStages: 2 } })));
    expect(failure.error).toMatchObject({
      issues: ['stages: a plan has at most 2 stages: merge related stages'],
    });
    expect(String(messagesOf(fake.requests[0])[0]?.content)).toContain('Plan at most 2 stages.');
  });

  it('a model failure is the router’s LlmError, without a repair turn', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({ kind: 'error', status: 400 });
    const failure = failed(await planQuestion(options(started)));
    expect(failure.error).toBeInstanceOf(LlmError);
    expect(failure.usage).toBeUndefined();
    expect(fake.requests).toHaveLength(1);
  });

  it('a repair turn failing at the provider: the failure keeps the first turn’s usage', async () => {
    const { llm: started, server: fake } = await fakeProvider();
    fake.enqueue({ kind: 'reply', text: 'No plan.', usage: { input: 100, output: 20 } });
    fake.enqueue({ kind: 'error', status: 400 });
    const failure = failed(await planQuestion(options(started)));
    expect(failure.error).toBeInstanceOf(LlmError);
    expect(failure.usage).toMatchObject({ inputTokens: 100, outputTokens: 20 });
    expect(fake.requests).toHaveLength(2);
  });
});
