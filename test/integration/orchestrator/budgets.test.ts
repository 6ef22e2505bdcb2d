import { describe, expect, it } from 'vitest';
import type { FakeResponse, FakeUsage } from '../../fakes/provider-types.js';
import { bearer } from '../../support/app.js';
import {
  answer,
  callsTo,
  MAX_ITERATIONS,
  systemTextOf,
  toolChoiceOf,
  useToolLoopHarness,
} from '../../support/tool-loop-harness.js';
import {
  createTenant,
  getWorkflow,
  postWorkflow,
  type StoredEvent,
  startWorkflow,
  storedEvents,
  waitForStatus,
} from '../../support/workflows.js';

/**
 * Budgets through the real OpenAI and Anthropic SDKs against the fake
 * provider server: each cap (iterations, tokens, cost) ends the workflow
 * with a warning naming it, one last turn without tools, and its reason on
 * the completed workflow; a request may lower the caps but not raise them;
 * a tenant's overrides apply to its workflows.
 *
 * Both models cost $1,000 per million input tokens and $2,000 per million
 * output tokens, so a turn of the fake's default usage (10 in, 5 out)
 * costs $0.02 and counts 15 tokens.
 */

const DEFAULT_COST_CAP_USD = 1;
const TURN_COST_USD = 0.02;
const TURN_TOKENS = 15;

const h = useToolLoopHarness({
  pricing: { input: 1000, output: 2000, cachedInput: 100 },
  env: { BUDGET_MAX_COST_USD: String(DEFAULT_COST_CAP_USD) },
});

/** `turns` replies that each call the calculator, then the best-effort answer. */
function toolTurnsThen(turns: number, text: string, usage?: FakeUsage): FakeResponse[] {
  const calls = Array.from({ length: turns }, (_unused, index) => ({
    ...(callsTo({ name: 'calculator', arguments: { expression: `${index} + 1` } }) as object),
    ...(usage ? { usage } : {}),
  })) as FakeResponse[];
  return [...calls, { kind: 'reply', text, ...(usage ? { usage } : {}) }];
}

function warningsOf(events: StoredEvent[]) {
  return events.filter((event) => event.type === 'warning').map((event) => event.detail);
}

function modelTurns(events: StoredEvent[]): number {
  return events.filter((event) => event.type === 'llm_call' && event.status === 'started').length;
}

describe('each budget ends the workflow with a best-effort answer, a warning naming it and its reason', () => {
  describe.each(['gpt', 'claude'])('on %s', (model) => {
    it('iterations: a request lowering the cap, seen over HTTP with the budget and the reason', async () => {
      h.provider.enqueue(...toolTurnsThen(2, 'Best effort after two.'));
      const { id, events, requests } = await h.run('Keep calculating', model, {
        budget: { maxIterations: 2 },
      });
      const workflow = await getWorkflow(h.testApp, h.tenant.key, id);
      expect(workflow).toMatchObject({
        status: 'completed',
        result: { answer: 'Best effort after two.', reason: 'iteration_cap' },
        budget: { maxIterations: 2, maxTokens: null, maxCostUsd: DEFAULT_COST_CAP_USD },
      });
      expect(warningsOf(events)).toEqual([
        expect.objectContaining({ code: 'iteration_cap', maxIterations: 2, iterations: 2 }),
      ]);
      // The warning comes between the last tool result and the last turn, which has no tools.
      const types = events.map((event) => `${event.type}:${event.status}`);
      expect(
        types.slice(types.indexOf('warning:info') - 1, types.indexOf('warning:info') + 2),
      ).toEqual(['tool_call:completed', 'warning:info', 'llm_call:started']);
      expect(modelTurns(events)).toBe(3);
      expect(toolChoiceOf(requests.at(-1))).toBe('none');
      // The last turn with tools asks for the answer; the turn without tools is the final one.
      expect(requests.map((request) => systemTextOf(request).match(/^Budget.*$/m)?.[0])).toEqual([
        undefined,
        'Budget: this is the last model turn with tools. Answer now with what you have gathered.',
        undefined,
      ]);
      expect(events.at(-1)).toMatchObject({
        type: 'workflow_end',
        status: 'completed',
        detail: { reason: 'iteration_cap' },
      });
    });

    it('tokens: checked before each turn, the last turn without tools counted too', async () => {
      const usage = { input: 100, output: 20 };
      // 120 tokens a turn: 240 after two turns, 360 after three, past the cap of 300.
      h.provider.enqueue(...toolTurnsThen(3, 'Best effort on tokens.', usage));
      const { workflow, events, requests } = await h.run('Keep calculating', model, {
        budget: { maxTokens: 300 },
      });
      expect(workflow).toMatchObject({
        status: 'completed',
        result: { answer: 'Best effort on tokens.', reason: 'token_budget' },
        budget: { maxIterations: MAX_ITERATIONS, maxTokens: 300 },
        usage: { inputTokens: 400, outputTokens: 80 },
      });
      expect(warningsOf(events)).toEqual([
        expect.objectContaining({ code: 'token_budget', maxTokens: 300, tokens: 360 }),
      ]);
      expect(modelTurns(events)).toBe(4);
      expect(toolChoiceOf(requests.at(-1))).toBe('none');
      // 180 of 300 tokens left before the second turn, 60 (a fifth) before the third.
      expect(requests.map((request) => systemTextOf(request).match(/^Budget.*$/m)?.[0])).toEqual([
        undefined,
        undefined,
        expect.stringMatching(/^Budget: the token budget is nearly spent\./),
        undefined,
      ]);
    });

    it('cost: at the catalogue’s prices, the workflow’s usage agreeing with the warning', async () => {
      // $0.02 a turn: $0.04 after two turns, $0.06 after three, past the cap of $0.05.
      h.provider.enqueue(...toolTurnsThen(3, 'Best effort on cost.'));
      const { workflow, events, requests } = await h.run('Keep calculating', model, {
        budget: { maxCostUsd: 0.05 },
      });
      expect(workflow).toMatchObject({
        status: 'completed',
        result: { answer: 'Best effort on cost.', reason: 'cost_budget' },
        budget: { maxCostUsd: 0.05 },
        usage: { costUsd: 4 * TURN_COST_USD },
      });
      expect(warningsOf(events)).toEqual([
        expect.objectContaining({
          code: 'cost_budget',
          maxCostUsd: 0.05,
          costUsd: 3 * TURN_COST_USD,
        }),
      ]);
      expect(modelTurns(events)).toBe(4);
      expect(toolChoiceOf(requests.at(-1))).toBe('none');
    });
  });

  it('a workflow answering within its budget completes as answered', async () => {
    h.provider.enqueue(...toolTurnsThen(1, 'It is 1.'));
    const { workflow, events } = await h.run('What is 0 + 1?', 'gpt', {
      budget: { maxTokens: 1000, maxCostUsd: 0.5 },
    });
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { answer: 'It is 1.', reason: 'answered' },
    });
    expect(warningsOf(events)).toEqual([]);
  });
});

describe('a request may lower its budget, never raise it', () => {
  it('a cap above the limit is refused with 400 budget_exceeds_limit naming each field', async () => {
    const response = await postWorkflow(h.testApp, h.tenant.key, {
      input: 'Spend more',
      budget: { maxIterations: MAX_ITERATIONS + 1, maxTokens: 10, maxCostUsd: 2 },
    });
    expect(response.statusCode).toBe(400);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({
      code: 'budget_exceeds_limit',
      errors: [
        {
          field: 'body.budget.maxIterations',
          message: expect.stringContaining(`at most ${MAX_ITERATIONS}`),
        },
        { field: 'body.budget.maxCostUsd', message: expect.stringContaining('at most 1') },
      ],
    });
  });

  it('an Idempotency-Key reused with a different budget is a 409', async () => {
    h.provider.enqueue(answer('Once.'));
    const headers = { 'idempotency-key': `budget-${Date.now()}` };
    const post = (maxTokens: number) =>
      postWorkflow(h.testApp, h.tenant.key, { input: 'Once', budget: { maxTokens } }, headers);
    const first = await post(100);
    expect(first.statusCode).toBe(202);
    expect((await post(100)).statusCode).toBe(200);
    const other = await post(200);
    expect(other.statusCode).toBe(409);
    expect(other.json().code).toBe('idempotency_key_reused');
    await waitForStatus(h.testApp, h.tenant.key, first.json().id, ['completed']);
  });
});

describe("a tenant's budget overrides", () => {
  it('apply to its workflows, bound its requests, and change for new workflows only', async () => {
    const tenant = await createTenant(h.testApp, h.operatorKey, {
      name: 'capped',
      budget: { maxTokens: 2 * TURN_TOKENS },
    });
    // 15 tokens a turn: the cap of 30 is reached after two turns.
    h.provider.enqueue(...toolTurnsThen(2, 'Best effort for the tenant.'));
    const id = await startWorkflow(h.testApp, tenant.key, { input: 'Keep calculating' });
    const workflow = await waitForStatus(h.testApp, tenant.key, id, ['completed', 'failed']);
    expect(workflow).toMatchObject({
      status: 'completed',
      result: { reason: 'token_budget' },
      budget: { maxIterations: MAX_ITERATIONS, maxTokens: 30, maxCostUsd: DEFAULT_COST_CAP_USD },
    });
    expect(warningsOf(await storedEvents(h.testApp, id))).toEqual([
      expect.objectContaining({ code: 'token_budget', maxTokens: 30, tokens: 30 }),
    ]);

    const above = await postWorkflow(h.testApp, tenant.key, {
      input: 'More',
      budget: { maxTokens: 31 },
    });
    expect(above.statusCode).toBe(400);
    expect(above.json()).toMatchObject({
      code: 'budget_exceeds_limit',
      errors: [{ field: 'body.budget.maxTokens', message: expect.stringContaining('at most 30') }],
    });

    // Raised above the configured default; the token cap back to the default (uncapped).
    const patched = await h.testApp.app.inject({
      method: 'PATCH',
      url: `/v1/tenants/${tenant.id}`,
      headers: bearer(h.operatorKey),
      payload: { budget: { maxCostUsd: 3, maxTokens: null } },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json().budget).toEqual({ maxIterations: null, maxTokens: null, maxCostUsd: 3 });
    h.provider.enqueue(answer('Within the raised cap.'));
    const raised = await postWorkflow(h.testApp, tenant.key, {
      input: 'More',
      budget: { maxCostUsd: 2.5 },
    });
    expect(raised.statusCode, raised.body).toBe(202);
    const done = await waitForStatus(h.testApp, tenant.key, raised.json().id, ['completed']);
    expect(done.budget).toEqual({
      maxIterations: MAX_ITERATIONS,
      maxTokens: null,
      maxCostUsd: 2.5,
    });
    // The first workflow keeps the budget it was created with.
    expect((await getWorkflow(h.testApp, tenant.key, id)).budget).toMatchObject({ maxTokens: 30 });
  });
});
