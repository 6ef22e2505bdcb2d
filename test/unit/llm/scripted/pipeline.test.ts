import { describe, expect, it } from 'vitest';
import type { ModelRequest } from '../../../../src/llm/types.js';
import type { ExecutionPlan, PlanStage } from '../../../../src/orchestrator/pipeline/plan.js';
import { buildStageInput } from '../../../../src/orchestrator/pipeline/stage-prompt.js';
import { buildSynthesisRequest } from '../../../../src/orchestrator/pipeline/synthesis-prompt.js';
import { calculatorTool } from '../../../../src/tools/builtins/calculator.js';
import { collect, textOf, toolCalls, toolDefinition } from './collect.js';

// Stage and synthesis turns as the pipeline builds them (the real prompt
// builders), so a change to their layout fails here.

const question = 'Compare the populations of France and Spain, then make a summary table';
const plan: ExecutionPlan = {
  stages: [
    {
      id: 'stage-1',
      title: 'Compare (populations)',
      goal: 'Compare the populations of France and Spain.',
      checkpoint: true,
    },
    {
      id: 'stage-2',
      title: 'Make a summary table',
      goal: 'Make a summary table.',
      checkpoint: false,
    },
  ],
};
const base = { stable: 'You are a helpful assistant.' };

function stageRequest(
  stage: PlanStage,
  options: { results?: Map<string, string>; feedback?: string } = {},
): ModelRequest {
  return buildStageInput({
    base,
    question,
    history: [],
    plan,
    stage,
    earlierResults: options.results ?? new Map(),
    feedback: options.feedback ?? null,
    findings: [],
    previousResult: options.feedback ? 'an earlier result' : null,
  });
}

const [first, second] = plan.stages as [PlanStage, PlanStage];
const calculator = toolDefinition('calculator', calculatorTool.parameters);

describe('the scripted model in a pipeline', () => {
  it('answers a stage with its goal, not with the prompt it was given', async () => {
    const text = textOf(await collect(stageRequest(first)));
    expect(text).toBe(
      '[scripted model] Worked on "Compare the populations of France and Spain." offline: no findings beyond the question itself.',
    );
  });

  it('says which feedback a modified stage followed', async () => {
    const text = textOf(
      await collect(stageRequest(first, { feedback: 'Use the 2023 census.\nIn millions.' })),
    );
    expect(text).toContain('following the feedback "Use the 2023 census. In millions."');
  });

  it('calls tools for the stage goal only, not for the question or earlier results quoted with it', async () => {
    const tools = [calculator];
    const quoting = stageRequest(second, {
      results: new Map([['stage-1', 'France 68 - 48 Spain']]),
    });
    const stage: PlanStage = {
      id: 'stage-2',
      title: 'Add them',
      goal: 'Work out 68 + 48.',
      checkpoint: false,
    };
    const calculating = stageRequest(stage, { results: new Map([['stage-1', '2 * 3']]) });

    const none = await collect({ ...quoting, tools });
    const calls = await collect({ ...calculating, tools });

    expect(toolCalls(none)).toEqual([]);
    expect(toolCalls(calls)).toEqual([
      { id: 'call_1', name: 'calculator', arguments: { expression: '68 + 48' } },
    ]);
  });

  it('synthesises the answer from each stage result, without the prompt around them', async () => {
    const request = buildSynthesisRequest({
      base,
      question,
      history: [],
      plan,
      results: new Map([
        ['stage-1', '[scripted model] Using calculator: 20'],
        ['stage-2', 'A table:\n| France | Spain |'],
      ]),
    });
    const text = textOf(await collect(request));
    expect(text).toBe(
      [
        `[scripted model] The answer to "${question}", put together offline from what the stages found:`,
        '- Compare (populations): Using calculator: 20',
        '- Make a summary table: A table: | France | Spain |',
        'Configure a model provider for a real answer.',
      ].join('\n'),
    );
  });

  it('says so when no stage produced a result', async () => {
    const request = buildSynthesisRequest({
      base,
      question,
      history: [],
      plan,
      results: new Map(),
    });
    expect(textOf(await collect(request))).toContain('- No stage produced a result.');
  });
});
