import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PLAN_MARKER } from '../../../../src/llm/scripted/markers.js';
import { collect, finishOf, textOf } from './collect.js';

const planSchema = z.object({
  goal: z.string().min(1),
  stages: z
    .array(
      z.object({
        id: z.string(),
        title: z.string().min(1),
        goal: z.string().min(1),
        checkpoint: z.boolean(),
        dependsOn: z.array(z.string()),
      }),
    )
    .min(2)
    .max(4),
});

async function plan(question: string) {
  const parts = await collect({
    system: { stable: `You are a planner.\n${PLAN_MARKER}` },
    messages: [{ role: 'user', content: question }],
  });
  expect(finishOf(parts)).toBe('stop');
  const parsed = planSchema.parse(JSON.parse(textOf(parts)));
  const ids = parsed.stages.map((stage) => stage.id);
  expect(new Set(ids).size).toBe(ids.length);
  expect(parsed.stages.filter((stage) => stage.checkpoint)).toHaveLength(1);
  expect(parsed.stages.at(-2)?.checkpoint).toBe(true);
  for (const stage of parsed.stages) {
    for (const dependency of stage.dependsOn) expect(ids).toContain(dependency);
  }
  return parsed;
}

describe('scripted model: planning turns', () => {
  it('splits a "first ... then ... and then" question into ordered stages', async () => {
    const result = await plan(
      'First find the GDP of France, then compare it to Germany and then write a summary.',
    );
    expect(result.stages.map((stage) => stage.goal)).toEqual([
      'Find the GDP of France.',
      'Compare it to Germany.',
      'Write a summary.',
    ]);
    expect(result.stages.map((stage) => stage.dependsOn)).toEqual([[], ['stage-1'], ['stage-2']]);
  });

  it('splits numbered steps', async () => {
    const result = await plan('1. Gather sales data 2. Compare regions');
    expect(result.stages.map((stage) => [stage.id, stage.title])).toEqual([
      ['stage-1', 'Gather sales data'],
      ['stage-2', 'Compare regions'],
    ]);
    expect(result.stages[0]?.checkpoint).toBe(true);
  });

  it('folds sentences beyond the fourth into the last stage', async () => {
    const result = await plan(
      'Find the population. Compare with last year. Explain the trend. Suggest actions. Write a memo.',
    );
    expect(result.stages).toHaveLength(4);
    expect(result.stages[3]?.goal).toBe('Suggest actions. Write a memo.');
  });

  it('falls back to a gather / analyse / synthesise plan for a one-part question', async () => {
    const result = await plan('What is the capital of France?');
    expect(result.goal).toBe('What is the capital of France?');
    expect(result.stages.map((stage) => stage.title)).toEqual([
      'Gather the facts',
      'Analyse the facts',
      'Synthesise the answer',
    ]);
  });
});
