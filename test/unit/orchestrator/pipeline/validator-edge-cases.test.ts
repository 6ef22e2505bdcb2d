import { describe, expect, it } from 'vitest';
import type { ExpectedOutput } from '../../../../src/orchestrator/pipeline/expected-output.js';
import { parsePlan } from '../../../../src/orchestrator/pipeline/plan.js';
import { validateStageResult } from '../../../../src/orchestrator/pipeline/validator.js';

/** The stage validator and the JSON reader on edge cases a pipeline hunt found (each failed before its fix). */

/** A lone stage expecting `expectedOutput`, validated on `result`. */
function validateAlone(expectedOutput: ExpectedOutput, result: string) {
  const stage = { id: 's', title: 'S', goal: 'g', checkpoint: false, expectedOutput };
  return validateStageResult({
    stage,
    result,
    earlierResults: new Map(),
    plan: { stages: [stage] },
  });
}

/** A json stage `totals`, then `report`, whose result must agree with it through `consistentWith`. */
function totalsThenReport(consistentWith: string[]) {
  return parsePlan(
    {
      stages: [
        { id: 'totals', title: 'Totals', goal: 'Sum', expectedOutput: { format: 'json' } },
        {
          id: 'report',
          title: 'Report',
          goal: 'Report',
          expectedOutput: { format: 'json', consistentWith },
        },
      ],
    },
    { maxStages: 12 },
  );
}

/**
 * A consistentWith id with surrounding spaces is trimmed, as stage ids and
 * dependsOn are: kept with its spaces, the validator looked up " totals "
 * among earlier results, found nothing, and skipped the comparison.
 */
describe('consistentWith naming an earlier stage with spaces around the id', () => {
  it('is either rejected by the plan check or enforced by the validator', () => {
    const parsed = totalsThenReport([' totals ']);
    if (!parsed.ok) return; // rejecting it would be fine too
    const [totals, report] = parsed.plan.stages;
    if (!totals || !report) throw new Error('two stages');
    const validation = validateStageResult({
      stage: report,
      result: '```json\n{"total": 999}\n```',
      earlierResults: new Map([['totals', '{"total": 1000}']]),
      plan: parsed.plan,
    });
    expect(validation.passed).toBe(false);
  });
});

/**
 * expectedOutput json `fields` must be the object's own keys with a
 * non-null value: one named like an Object.prototype member ("constructor",
 * "valueOf") was found on the prototype, so a result lacking it passed.
 */
describe('a json field named like an Object.prototype member', () => {
  it('is reported missing when the object lacks it', () => {
    const validation = validateAlone(
      { format: 'json', fields: ['constructor', 'valueOf'] },
      '{"name": "x"}',
    );
    expect(validation.passed).toBe(false);
  });
});

/**
 * The stage is told to reply with one JSON object "in a ```json block": a
 * result that does so after quoting a plain (untagged) code block is read
 * from its ```json block, not from the plain one before it.
 */
describe('a json result after a plain code block', () => {
  it('is read from its ```json block', () => {
    const validation = validateAlone(
      { format: 'json', fields: ['total'] },
      'The source table:\n```\n| item | price |\n| a    | 3     |\n```\n```json\n{"total": 3}\n```',
    );
    expect(validation).toEqual({ passed: true, findings: [] });
  });
});

/**
 * expectedOutput list: "at least minItems Markdown list items". A Markdown
 * thematic break (`* * *`, `- - -`) is a horizontal rule, not a list item:
 * each counted as one, so a result with no list at all met minItems 2.
 */
describe('list minItems', () => {
  it('does not count horizontal rules as list items', () => {
    const validation = validateAlone(
      { format: 'list', minItems: 2 },
      'No suppliers were found.\n\n* * *\n\nSee above.\n\n- - -\n',
    );
    expect(validation.passed).toBe(false);
  });
});

/** consistentWith compares numbers written as text by value: commas only as thousands separators. */
describe('consistentWith comparing numbers written as text', () => {
  const parsed = totalsThenReport(['totals']);
  const agrees = (now: string, before: string) => {
    if (!parsed.ok) throw new Error('the plan parses');
    const report = parsed.plan.stages[1];
    if (!report) throw new Error('two stages');
    return validateStageResult({
      stage: report,
      result: `\`\`\`json\n{"total": ${now}}\n\`\`\``,
      earlierResults: new Map([['totals', `{"total": ${before}}`]]),
      plan: parsed.plan,
    }).passed;
  };

  it('agree: 1000, "1000", "1,000", "1e3", "1,000.50" and 1000.5', () => {
    expect(agrees('1000', '"1,000"')).toBe(true);
    expect(agrees('"1e3"', '1000')).toBe(true);
    expect(agrees('"1,000.50"', '1000.5')).toBe(true);
    expect(agrees('"-2,500"', '-2500')).toBe(true);
  });

  it('differ: "1,2,3" is not 123, "12,34" is not 1234', () => {
    expect(agrees('"1,2,3"', '123')).toBe(false);
    expect(agrees('"12,34"', '1234')).toBe(false);
  });
});
