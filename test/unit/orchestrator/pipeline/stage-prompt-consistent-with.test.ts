import { describe, expect, it } from 'vitest';
import { parsePlan } from '../../../../src/orchestrator/pipeline/plan.js';
import { buildStageInput } from '../../../../src/orchestrator/pipeline/stage-prompt.js';

/**
 * A stage with `dependsOn` sees those results, and also those its
 * `expectedOutput.consistentWith` names (the validator compares its result
 * to them): shown only its dependsOn, its first attempt could only guess
 * the values it must match, and spent a validation retry.
 */
describe('consistentWith naming a stage outside dependsOn', () => {
  it('either is rejected by the plan check or the stage is shown that result', () => {
    const parsed = parsePlan(
      {
        stages: [
          { id: 'totals', title: 'Totals', goal: 'Sum', expectedOutput: { format: 'json' } },
          { id: 'notes', title: 'Notes', goal: 'Notes' },
          {
            id: 'report',
            title: 'Report',
            goal: 'Report',
            dependsOn: ['notes'],
            expectedOutput: { format: 'json', consistentWith: ['totals'] },
          },
        ],
      },
      { maxStages: 12 },
    );
    if (!parsed.ok) return; // rejecting the plan would be a fix too
    const report = parsed.plan.stages[2];
    if (!report) throw new Error('three stages');
    const input = buildStageInput({
      base: { stable: 'base' },
      question: 'q',
      history: [],
      plan: parsed.plan,
      stage: report,
      earlierResults: new Map([
        ['totals', '{"total": 1000, "currency": "EUR"}'],
        ['notes', 'Some notes.'],
      ]),
      feedback: null,
      findings: [],
      previousResult: null,
    });
    const message = JSON.stringify(input.messages);
    expect(message).toContain('must keep their values');
    expect(message).toContain('"total\\": 1000');
  });
});
