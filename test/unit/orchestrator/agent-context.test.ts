import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Message } from '../../../src/llm/types.js';
import { type AgentTracker, createAgentContext } from '../../../src/orchestrator/agent-context.js';
import { workflowAsInserted } from '../../../src/workflows/early-start.js';
import type { Workflow, WorkflowBudget } from '../../../src/workflows/types.js';

const DEFAULT_BUDGET: WorkflowBudget = { maxIterations: 8, maxTokens: null, maxCostUsd: 1 };

const tracker: AgentTracker = {
  emit: async () => {
    throw new Error('not emitted in these tests');
  },
  enqueue: () => undefined,
  record: async () => {
    throw new Error('not recorded in these tests');
  },
  token: () => undefined,
};

function workflow(overrides: Partial<Workflow> = {}): Workflow {
  const inserted = workflowAsInserted(
    {
      id: randomUUID(),
      tenantId: randomUUID(),
      sessionId: 'session-1',
      sessionSeq: 0,
      mode: 'auto',
      model: 'gpt',
      input: 'What is six times seven?',
      tools: ['calculator'],
      metadata: {},
      idempotencyKey: null,
      requestHash: null,
    },
    new Date(),
  );
  return { ...inserted, ...overrides };
}

describe('AgentContext', () => {
  it('carries the workflow’s question, model, tools, session and budget, and what earlier runs spent', () => {
    const signal = new AbortController().signal;
    const source = workflow({
      kind: 'simple',
      budget: { maxIterations: 3, maxTokens: 500, maxCostUsd: null },
      usage: { inputTokens: 40, outputTokens: 2, cachedInputTokens: 0, costUsd: 0.25 },
    });
    const history: Message[] = [{ role: 'user', content: 'Earlier question' }];
    const context = createAgentContext({
      workflow: source,
      history,
      tracker,
      signal,
      defaultBudget: DEFAULT_BUDGET,
    });
    expect(context).toEqual({
      tenantId: source.tenantId,
      workflowId: source.id,
      input: 'What is six times seven?',
      mode: 'auto',
      kind: 'simple',
      sessionId: 'session-1',
      history,
      model: 'gpt',
      tools: ['calculator'],
      budget: { maxIterations: 3, maxTokens: 500, maxCostUsd: null },
      spentBefore: { tokens: 42, costUsd: 0.25 },
      tracker,
      signal,
    });
  });

  it('a workflow stored without a budget gets the configured one', () => {
    const context = createAgentContext({
      workflow: workflow({ budget: null }),
      history: [],
      tracker,
      signal: new AbortController().signal,
      defaultBudget: DEFAULT_BUDGET,
    });
    expect(context.budget).toEqual(DEFAULT_BUDGET);
    expect(context.spentBefore).toEqual({ tokens: 0, costUsd: 0 });
  });

  it('is frozen, with its arrays and records, and does not follow later changes to what it was made from', () => {
    const source = workflow({ budget: { maxIterations: 3, maxTokens: null, maxCostUsd: null } });
    const history: Message[] = [{ role: 'user', content: 'Earlier question' }];
    const context = createAgentContext({
      workflow: source,
      history,
      tracker,
      signal: new AbortController().signal,
      defaultBudget: DEFAULT_BUDGET,
    });
    for (const part of [
      context,
      context.history,
      context.tools,
      context.budget,
      context.spentBefore,
    ]) {
      expect(Object.isFrozen(part)).toBe(true);
    }
    expect(() => {
      (context as { input: string }).input = 'another question';
    }).toThrow(TypeError);
    expect(() => {
      (context.history as Message[]).push({ role: 'user', content: 'more' });
    }).toThrow(TypeError);

    // The run's own state changes as it goes; the context it answers from does not.
    source.model = 'claude';
    source.tools.push('current_time');
    if (source.budget) source.budget.maxIterations = 10;
    history.push({ role: 'assistant', content: 'Earlier answer', toolCalls: [] });
    expect(context).toMatchObject({
      model: 'gpt',
      tools: ['calculator'],
      budget: { maxIterations: 3 },
      history: [{ role: 'user', content: 'Earlier question' }],
    });
  });
});
