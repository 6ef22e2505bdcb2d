import { describe, expect, it } from 'vitest';
import type { ExpectedOutput } from '../../../../src/orchestrator/pipeline/expected-output.js';
import type { PlanStage } from '../../../../src/orchestrator/pipeline/plan.js';
import { readJsonObject } from '../../../../src/orchestrator/pipeline/read-json.js';
import { validateStageResult } from '../../../../src/orchestrator/pipeline/validator.js';

const facts: PlanStage = {
  id: 'facts',
  title: 'Gather facts',
  goal: 'Find the populations.',
  checkpoint: false,
  expectedOutput: { format: 'json', fields: ['france', 'germany'] },
};

function stageWith(expectedOutput?: ExpectedOutput): PlanStage {
  return {
    id: 'current',
    title: 'Current',
    goal: 'Do it.',
    checkpoint: false,
    ...(expectedOutput ? { expectedOutput } : {}),
  };
}

function validate(
  expectedOutput: ExpectedOutput | undefined,
  result: string,
  earlier: Record<string, string> = {},
) {
  const stage = stageWith(expectedOutput);
  return validateStageResult({
    stage,
    result,
    earlierResults: new Map(Object.entries(earlier)),
    plan: { stages: [facts, stage] },
  });
}

describe('StageValidator', () => {
  it('passes any non-empty result when no shape is declared', () => {
    expect(validate(undefined, 'Paris.')).toEqual({ passed: true, findings: [] });
  });

  it('rejects an empty or blank result, whatever the shape', () => {
    for (const output of [undefined, { format: 'json' } as const]) {
      expect(validate(output, '  \n ')).toEqual({
        passed: false,
        findings: ['The result is empty: reply with the result the stage goal asks for.'],
      });
    }
  });

  it('text: names the fields the result does not mention', () => {
    const output: ExpectedOutput = { format: 'text', fields: ['Summary', 'Risks', 'Costs'] };
    expect(validate(output, '## Summary\nfine.\n## costs\nlow.').findings).toEqual([
      'The result does not cover "Risks": address each of them by name.',
    ]);
    expect(validate(output, 'summary, risks and costs').passed).toBe(true);
  });

  it('list: counts Markdown items against minItems', () => {
    const output: ExpectedOutput = { format: 'list', minItems: 3 };
    expect(validate(output, '- one\n* two\n1. three').passed).toBe(true);
    expect(validate(output, 'Intro\n- one\n2) two\n-not an item').findings).toEqual([
      'The result has 2 list items but needs at least 3: one item per line, starting with "- " or "1. ".',
    ]);
    expect(validate({ format: 'list' }, 'just prose').findings).toEqual([
      'The result has 0 list items but needs at least 1: one item per line, starting with "- " or "1. ".',
    ]);
  });

  it('json: wants one object, fenced or bare, with the declared fields non-null', () => {
    const output: ExpectedOutput = { format: 'json', fields: ['total', 'unit', 'source'] };
    expect(
      validate(output, 'Here:\n```json\n{"total": 3, "unit": "kg", "source": "x"}\n```').passed,
    ).toBe(true);
    expect(validate(output, '{"total": 3, "unit": null}').findings).toEqual([
      'The JSON object lacks the fields "unit", "source" (or they are null).',
    ]);
    expect(validate(output, 'no json here').findings).toEqual([
      'The result must be one JSON object in a ```json block, but the reply contains no JSON object.',
    ]);
    expect(validate(output, '```json\n[1, 2]\n```').findings).toEqual([
      'The result must be one JSON object in a ```json block, but the JSON is not an object.',
    ]);
  });

  it('consistency: shared scalar fields must keep the earlier stage’s values', () => {
    const output: ExpectedOutput = { format: 'json', consistentWith: ['facts'] };
    const earlier = { facts: '{"france": 68000000, "germany": "84,400,000", "note": "census"}' };
    expect(
      validate(output, '{"france": "68000000", "germany": 84400000, "note": " CENSUS "}', earlier)
        .passed,
    ).toBe(true);
    expect(validate(output, '{"france": 67000000, "ratio": 0.8}', earlier).findings).toEqual([
      'Field "france" is 67000000 here but 68000000 in the result of stage "facts" (Gather facts): use the same value.',
    ]);
  });

  it('consistency: an earlier stage without a JSON result gives nothing to compare', () => {
    const output: ExpectedOutput = { format: 'json', consistentWith: ['facts'] };
    expect(validate(output, '{"france": 1}', { facts: 'prose, continued past a failure' })).toEqual(
      { passed: true, findings: [] },
    );
    expect(validate(output, '{"france": 1}').passed).toBe(true);
  });
});

describe('readJsonObject', () => {
  it('reads a bare object with prose around it, and reports unparsable JSON', () => {
    expect(readJsonObject('Sure! {"a": 1} Hope it helps.')).toEqual({ ok: true, value: { a: 1 } });
    const broken = readJsonObject('{"a": 1,');
    expect(broken.ok).toBe(false);
    expect(readJsonObject('```\n{"a": }\n```')).toMatchObject({ ok: false });
  });

  it('takes the first plain or json fence, after an example fence of another language', () => {
    expect(readJsonObject('```json\n{"a": 1}\n```')).toEqual({ ok: true, value: { a: 1 } });
    expect(
      readJsonObject('Like this:\n```python\nx = {}\n```\nHere:\n```JSON\n{"b": 2}\n```'),
    ).toEqual({ ok: true, value: { b: 2 } });
  });

  it('a fence followed by thousands of newlines is read at once (its regular expression backtracked for seconds)', () => {
    expect(readJsonObject(`\`\`\`json\n${'\n'.repeat(5_000)}x`)).toEqual({
      ok: false,
      problem: 'the reply contains no JSON object',
    });
  });

  it('a NUL or a lone surrogate escape is a problem to repair, not a value to store', () => {
    expect(readJsonObject('{"title": "a\\u0000b"}')).toEqual({
      ok: false,
      problem: 'the JSON has a NUL character (\\u0000) at title',
    });
    expect(readJsonObject('{"stages": [{"goal": "\\ud800"}]}')).toMatchObject({
      ok: false,
      problem: expect.stringContaining(
        'lone UTF-16 surrogate escape, which is not text at stages.0.goal',
      ),
    });
  });
});

describe('consistency with long numbers', () => {
  it('a 60,000-digit string is compared as text (its number pattern took seconds)', () => {
    const output: ExpectedOutput = { format: 'json', consistentWith: ['facts'] };
    const digits = '1'.repeat(60_000);
    const earlier = { facts: `{"n": "${digits}"}` };
    expect(validate(output, `{"n": "${digits}"}`, earlier).passed).toBe(true);
    expect(validate(output, `{"n": "${digits}2"}`, earlier).passed).toBe(false);
  });
});
