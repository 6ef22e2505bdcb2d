import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { planFor } from '../../../../src/llm/scripted/plan.js';
import {
  DEFAULT_MAX_STAGES,
  type ExecutionPlan,
  type PlanLimits,
  parsePlan,
  parseStoredPlan,
  replaceStagesAfter,
  toStoredPlan,
} from '../../../../src/orchestrator/pipeline/plan.js';

const limits: PlanLimits = { maxStages: DEFAULT_MAX_STAGES };

const stage = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  title: `Title ${id}`,
  goal: `Goal of ${id}`,
  checkpoint: false,
  ...extra,
});

const stages = (count: number) =>
  Array.from({ length: count }, (_, index) => stage(`stage-${index + 1}`));

function issuesOf(value: unknown, bounds = limits): string[] {
  const parsed = parsePlan(value, bounds);
  if (parsed.ok) throw new Error('expected an invalid plan');
  return parsed.issues;
}

function planOf(value: unknown, bounds = limits): ExecutionPlan {
  const parsed = parsePlan(value, bounds);
  if (!parsed.ok) throw new Error(parsed.issues.join('\n'));
  return parsed.plan;
}

describe('ExecutionPlan schema: bounds', () => {
  it('accepts the default maximum of stages and refuses one more', () => {
    expect(planOf({ stages: stages(DEFAULT_MAX_STAGES) }).stages).toHaveLength(12);
    expect(issuesOf({ stages: stages(DEFAULT_MAX_STAGES + 1) })).toEqual([
      'stages: a plan has at most 12 stages: merge related stages',
    ]);
  });

  it('takes the maximum as a parameter: the benchmark plans 200 stages', () => {
    expect(planOf({ stages: stages(200) }, { maxStages: 200 }).stages).toHaveLength(200);
    expect(issuesOf({ stages: stages(201) }, { maxStages: 200 })).toHaveLength(1);
  });

  it('refuses an empty plan, a blank goal and an id with spaces', () => {
    expect(issuesOf({ stages: [] })).toEqual(['stages: a plan has at least one stage']);
    const issues = issuesOf({ stages: [stage('a b', { goal: '   ' })] });
    expect(issues).toHaveLength(2);
    expect(issues[0]).toMatch(/^stages\[0\]\.id: a stage id is 1-64 letters/);
    expect(issues[1]).toMatch(/^stages\[0\]\.goal: /);
  });

  it('defaults checkpoint to false and drops keys it does not know', () => {
    const plan = planOf({
      goal: 'the scripted model adds one',
      stages: [{ id: 's1', title: 'T', goal: 'G' }],
    });
    expect(plan).toEqual({ stages: [{ id: 's1', title: 'T', goal: 'G', checkpoint: false }] });
  });
});

describe('ExecutionPlan schema: references', () => {
  it('refuses duplicate ids', () => {
    expect(issuesOf({ stages: [stage('a'), stage('a')] })).toEqual([
      'stages[1].id: duplicate stage id "a"',
    ]);
  });

  it('lets dependsOn name earlier stages only, so no plan has a cycle', () => {
    expect(planOf({ stages: [stage('a'), stage('b', { dependsOn: ['a'] })] }).stages).toHaveLength(
      2,
    );
    expect(
      issuesOf({
        stages: [stage('a', { dependsOn: ['b'] }), stage('b', { dependsOn: ['b', 'zzz'] })],
      }),
    ).toEqual([
      'stages[0].dependsOn[0]: "b" is not an earlier stage: a stage may refer to earlier stages only',
      'stages[1].dependsOn[0]: "b" is not an earlier stage: a stage may refer to earlier stages only',
      'stages[1].dependsOn[1]: "zzz" is not a stage of this plan',
    ]);
  });

  it('checks stage tools against the offered ones when they are given', () => {
    const plan = { stages: [stage('a', { tools: ['web_search', 'teleport'] })] };
    expect(parsePlan(plan, limits).ok).toBe(true);
    expect(issuesOf(plan, { maxStages: 12, toolNames: ['web_search', 'calculator'] })).toEqual([
      'stages[0].tools[1]: unknown tool "teleport"; available: web_search, calculator',
    ]);
  });

  it('allows consistentWith only between json stages, pointing backwards', () => {
    const json = { format: 'json', fields: ['total'] };
    expect(
      parsePlan(
        {
          stages: [
            stage('a', { expectedOutput: json }),
            stage('b', { expectedOutput: { ...json, consistentWith: ['a'] } }),
          ],
        },
        limits,
      ).ok,
    ).toBe(true);
    expect(
      issuesOf({
        stages: [
          stage('a', { expectedOutput: { format: 'text' } }),
          stage('b', { expectedOutput: { format: 'json', consistentWith: ['a', 'c'] } }),
          stage('c', { expectedOutput: { format: 'list', consistentWith: ['a'], minItems: 2 } }),
        ],
      }),
    ).toEqual([
      'stages[2].expectedOutput.consistentWith: consistentWith applies to format "json" only (it compares JSON fields)',
      'stages[1].expectedOutput.consistentWith[0]: stage "a" does not declare expectedOutput format "json", so there are no fields to compare',
      'stages[1].expectedOutput.consistentWith[1]: "c" is not an earlier stage: a stage may refer to earlier stages only',
      'stages[2].expectedOutput.consistentWith[0]: stage "a" does not declare expectedOutput format "json", so there are no fields to compare',
    ]);
  });

  it('refuses minItems on anything but a list', () => {
    expect(
      issuesOf({ stages: [stage('a', { expectedOutput: { format: 'text', minItems: 2 } })] }),
    ).toEqual(['stages[0].expectedOutput.minItems: minItems applies to format "list" only']);
  });
});

describe('the scripted model’s plans', () => {
  it('validate against the ExecutionPlan schema, however the question is shaped', () => {
    const questions = [
      'What is the capital of France?',
      'First find the GDP of France, then compare it to Germany and then write a summary.',
      '1. Gather sales data 2. Compare regions',
      `Explain ${'very '.repeat(3000)}long things. Then summarise them.`,
    ];
    for (const question of questions) {
      const parsed = parsePlan(planFor(question), limits);
      expect(parsed.ok, JSON.stringify(parsed)).toBe(true);
    }
  });
});

describe('persisted plans', () => {
  const fixture = (name = 'pipeline-plan-v1'): unknown =>
    JSON.parse(readFileSync(new URL(`../../../fixtures/${name}.json`, import.meta.url), 'utf8'));

  it('the frozen schemaVersion 1 fixture parses', () => {
    const plan = parseStoredPlan(fixture());
    expect(plan.stages.map((s) => s.id)).toEqual(['stage-1', 'stage-2', 'stage-3']);
    expect(plan.stages[1]?.expectedOutput?.consistentWith).toEqual(['stage-1']);
  });

  it('round-trips through toStoredPlan, and refuses an unknown schemaVersion', () => {
    const plan = parseStoredPlan(fixture());
    expect(parseStoredPlan(JSON.parse(JSON.stringify(toStoredPlan(plan))))).toEqual(plan);
    expect(() => parseStoredPlan({ ...(fixture() as object), schemaVersion: 2 })).toThrow();
  });

  it('a schemaVersion 1 plan with the tools it was made with (since 2026-12-03) parses; one without has none', () => {
    const plan = parseStoredPlan(fixture('pipeline-plan-v1-tool-names'));
    expect(plan.toolNames).toEqual(['calculator', 'web_search']);
    expect(plan.stages.map((s) => s.tools)).toEqual([['web_search'], []]);
    expect(parseStoredPlan(JSON.parse(JSON.stringify(toStoredPlan(plan))))).toEqual(plan);
    expect(parseStoredPlan(fixture())).not.toHaveProperty('toolNames');
  });

  it('loads a plan larger than the current bound: the bound applies when planning', () => {
    expect(parseStoredPlan({ schemaVersion: 1, stages: stages(50) }).stages).toHaveLength(50);
  });
});

describe('replaceStagesAfter (modify with a plan patch)', () => {
  const plan = planOf({ stages: [stage('a'), stage('b'), stage('c'), stage('d')] });

  it('keeps the stages through the current one and puts the patch after them', () => {
    const patched = replaceStagesAfter(
      plan,
      'b',
      { stages: [stage('x', { dependsOn: ['a', 'b'] })] },
      limits,
    );
    expect(patched.ok && patched.plan.stages.map((s) => s.id)).toEqual(['a', 'b', 'x']);
  });

  it('an empty patch drops the stages after the current one; the kept ones still validate', () => {
    const patched = replaceStagesAfter(plan, 'b', { stages: [] }, limits);
    expect(patched.ok && patched.plan.stages.map((s) => s.id)).toEqual(['a', 'b']);
    const first = replaceStagesAfter(plan, 'a', { stages: [] }, limits);
    expect(first.ok && first.plan.stages.map((s) => s.id)).toEqual(['a']);
  });

  it('validates the patched plan, with issues indexed in the patch', () => {
    const patched = replaceStagesAfter(
      plan,
      'b',
      { stages: [stage('x'), stage('a'), stage('y', { dependsOn: ['z'] })] },
      limits,
    );
    expect(patched).toEqual({
      ok: false,
      issues: [
        'stages[1].id: duplicate stage id "a"',
        'stages[2].dependsOn[0]: "z" is not a stage of this plan',
      ],
    });
    expect(replaceStagesAfter(plan, 'b', { stages: stages(11) }, limits).ok).toBe(false);
    expect(replaceStagesAfter(plan, 'nope', { stages: [] }, limits)).toEqual({
      ok: false,
      issues: ['"nope" is not a stage of the plan'],
    });
  });

  it('checks the patch’s tools against those the plan was made with, and keeps them', () => {
    const withTools = planOf(
      { stages: [stage('a', { tools: ['calculator'] }), stage('b')] },
      { maxStages: 12, toolNames: ['calculator', 'web_search'] },
    );
    expect(withTools.toolNames).toEqual(['calculator', 'web_search']);
    expect(
      replaceStagesAfter(withTools, 'a', { stages: [stage('x', { tools: ['teleport'] })] }, limits),
    ).toEqual({
      ok: false,
      issues: ['stages[0].tools[0]: unknown tool "teleport"; available: calculator, web_search'],
    });
    const patched = replaceStagesAfter(
      withTools,
      'a',
      { stages: [stage('x', { tools: ['web_search'] })] },
      limits,
    );
    expect(patched.ok && patched.plan.toolNames).toEqual(['calculator', 'web_search']);
    // A plan saved before it kept its tools: its patches' tools are not checked.
    const older = replaceStagesAfter(
      plan,
      'b',
      { stages: [stage('x', { tools: ['teleport'] })] },
      limits,
    );
    expect(older.ok).toBe(true);
  });
});
