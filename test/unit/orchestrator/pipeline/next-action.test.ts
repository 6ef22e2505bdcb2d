import { describe, expect, it } from 'vitest';
import { nextAction, stageResults } from '../../../../src/orchestrator/pipeline/next-action.js';
import { buildPipelineView } from '../../../../src/orchestrator/pipeline/pipeline-view.js';
import type { ExecutionPlan } from '../../../../src/orchestrator/pipeline/plan.js';
import type { AttemptReason, StageAttempt } from '../../../../src/store/pipelines.js';

const plan: ExecutionPlan = {
  stages: [
    { id: 'a', title: 'A', goal: 'Do A.', checkpoint: false },
    { id: 'b', title: 'B', goal: 'Do B.', checkpoint: true },
    { id: 'c', title: 'C', goal: 'Do C.', checkpoint: false },
  ],
};
const policy = { maxValidationRetries: 2 };

const at = new Date('2026-01-01T00:00:00Z');

function attempt(stageId: string, number: number, extra: Partial<StageAttempt> = {}): StageAttempt {
  return {
    stageId,
    attempt: number,
    planRevision: 1,
    status: 'completed',
    reason: number === 1 ? 'first' : 'validation_retry',
    feedback: null,
    result: `result of ${stageId}#${number}`,
    validation: { passed: true, findings: [] },
    error: null,
    usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, costUsd: 0 },
    acceptedAt: null,
    createdAt: at,
    startedAt: at,
    finishedAt: at,
    elapsedMs: 5,
    ...extra,
  };
}

const rejected = (stageId: string, number: number, extra: Partial<StageAttempt> = {}) =>
  attempt(stageId, number, {
    status: 'failed',
    validation: { passed: false, findings: [`finding ${number}`] },
    ...extra,
  });

const decide = (attempts: StageAttempt[]) => nextAction(plan, attempts, policy);

describe('nextAction', () => {
  it('starts with the first stage’s first attempt', () => {
    expect(decide([])).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'a' },
      attempt: 1,
      reason: 'first',
      feedback: null,
      findings: [],
      previousResult: null,
      interruptedAttempt: null,
    });
  });

  it('never runs a completed stage again: goes on with the next one', () => {
    expect(decide([attempt('a', 1)])).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'b' },
      attempt: 1,
    });
  });

  it('pauses after a checkpoint stage until the user continues, then goes on', () => {
    const done = [attempt('a', 1), attempt('b', 1)];
    expect(decide(done)).toMatchObject({ kind: 'await_review', stage: { id: 'b' }, attempt: 1 });
    const continued = [attempt('a', 1), attempt('b', 1, { acceptedAt: at })];
    expect(decide(continued)).toMatchObject({ kind: 'run_stage', stage: { id: 'c' } });
  });

  it('a checkpoint stage awaiting review passes on the result under review, as done stages do', () => {
    const attempts = [attempt('a', 1), rejected('b', 1), attempt('b', 2)];
    expect(decide(attempts)).toMatchObject({
      kind: 'await_review',
      attempt: 2,
      latest: { stageId: 'b', attempt: 2, result: 'result of b#2' },
    });
    expect(stageResults(plan, attempts, policy)).toEqual(
      new Map([
        ['a', 'result of a#1'],
        ['b', 'result of b#2'],
      ]),
    );
  });

  it('retries a failed validation with its findings, then pauses when retries are used up', () => {
    expect(decide([rejected('a', 1)])).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'a' },
      attempt: 2,
      reason: 'validation_retry',
      findings: ['finding 1'],
      previousResult: 'result of a#1',
    });
    expect(decide([rejected('a', 1), rejected('a', 2)])).toMatchObject({
      kind: 'run_stage',
      attempt: 3,
      findings: ['finding 2'],
    });
    expect(decide([rejected('a', 1), rejected('a', 2), rejected('a', 3)])).toEqual({
      kind: 'stage_failed',
      stage: plan.stages[0],
      attempt: 3,
      findings: ['finding 3'],
      error: null,
    });
  });

  it('pauses at once when the model failed (the router has retried already)', () => {
    const error = { code: 'provider_unavailable', message: 'The model provider failed' };
    expect(
      decide([attempt('a', 1, { status: 'failed', validation: null, result: null, error })]),
    ).toMatchObject({ kind: 'stage_failed', stage: { id: 'a' }, error, findings: [] });
  });

  it('a user retry starts the pending attempt afresh and resets the retry count', () => {
    const attempts = [
      rejected('a', 1),
      rejected('a', 2),
      rejected('a', 3),
      attempt('a', 4, {
        status: 'pending',
        reason: 'user_retry',
        startedAt: null,
        finishedAt: null,
        result: null,
        validation: null,
      }),
    ];
    expect(decide(attempts)).toMatchObject({
      kind: 'run_stage',
      attempt: 4,
      reason: 'user_retry',
      findings: [],
      feedback: null,
      previousResult: null,
    });
    attempts[3] = rejected('a', 4, { reason: 'user_retry' });
    expect(decide(attempts)).toMatchObject({
      kind: 'run_stage',
      attempt: 5,
      reason: 'validation_retry',
    });
  });

  it('modify feedback reaches the re-run and every retry after it', () => {
    const modified = attempt('b', 2, {
      status: 'pending',
      reason: 'user_modify',
      feedback: 'Shorter, please.',
      result: null,
      validation: null,
      startedAt: null,
      finishedAt: null,
    });
    const attempts = [attempt('a', 1), attempt('b', 1), modified];
    expect(decide(attempts)).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'b' },
      attempt: 2,
      reason: 'user_modify',
      feedback: 'Shorter, please.',
      previousResult: 'result of b#1',
    });
    attempts[2] = rejected('b', 2, { reason: 'user_modify', feedback: 'Shorter, please.' });
    expect(decide(attempts)).toMatchObject({ attempt: 3, feedback: 'Shorter, please.' });
    attempts.push(
      attempt('b', 3, {
        status: 'pending',
        reason: 'user_retry',
        result: null,
        startedAt: null,
        finishedAt: null,
      }),
    );
    expect(decide(attempts)).toMatchObject({
      attempt: 3,
      reason: 'user_retry',
      feedback: 'Shorter, please.',
    });
  });

  it('continues past a failed stage the user accepted', () => {
    const attempts = [
      attempt('a', 1, {
        status: 'failed',
        error: { code: 'x', message: 'y' },
        result: null,
        acceptedAt: at,
      }),
    ];
    expect(decide(attempts)).toMatchObject({ kind: 'run_stage', stage: { id: 'b' } });
  });

  it('re-runs an attempt a crash cut off, once, with the findings it was fixing', () => {
    const cutOff = attempt('a', 2, {
      status: 'started',
      result: null,
      validation: null,
      finishedAt: null,
    });
    expect(decide([rejected('a', 1), cutOff])).toMatchObject({
      kind: 'run_stage',
      attempt: 3,
      reason: 'resumed',
      findings: ['finding 1'],
      interruptedAttempt: 2,
    });
    // Once the cut-off attempt is failed as interrupted, the same re-run follows, with nothing left to fail.
    const interrupted = attempt('a', 2, {
      status: 'failed',
      result: null,
      validation: null,
      error: { code: 'interrupted', message: 'cut off' },
    });
    expect(decide([rejected('a', 1), interrupted])).toMatchObject({
      attempt: 3,
      reason: 'resumed',
      interruptedAttempt: null,
    });
  });

  it('interrupted attempts use up no validation retries', () => {
    const interrupted = (n: number) =>
      attempt('a', n, {
        status: 'failed',
        result: null,
        validation: null,
        error: { code: 'interrupted', message: '' },
        reason: 'resumed',
      });
    const attempts = [
      rejected('a', 1),
      interrupted(2),
      interrupted(3),
      rejected('a', 4, { reason: 'resumed' }),
    ];
    expect(decide(attempts)).toMatchObject({
      kind: 'run_stage',
      attempt: 5,
      reason: 'validation_retry',
    });
  });

  it('a re-run of an attempt a crash cut off keys its tool calls as that attempt; every other run as itself', () => {
    const interrupted = (n: number, reason: AttemptReason) =>
      attempt('a', n, {
        status: 'failed',
        result: null,
        validation: null,
        error: { code: 'interrupted', message: '' },
        reason,
      });
    const started = (n: number, reason: AttemptReason) =>
      attempt('a', n, { status: 'started', result: null, validation: null, reason });
    expect(decide([])).toMatchObject({ attempt: 1, keyAttempt: 1 });
    // Cut off twice: both re-runs repeat the first attempt's calls.
    expect(decide([started(1, 'first')])).toMatchObject({ attempt: 2, keyAttempt: 1 });
    expect(decide([interrupted(1, 'first'), started(2, 'resumed')])).toMatchObject({
      attempt: 3,
      reason: 'resumed',
      keyAttempt: 1,
    });
    // A validation retry cut off: its re-run repeats its calls, not the first attempt's.
    expect(decide([rejected('a', 1), interrupted(2, 'validation_retry')])).toMatchObject({
      attempt: 3,
      reason: 'resumed',
      keyAttempt: 2,
    });
    // The re-run's result rejected: the validation retry is a run of its own.
    expect(
      decide([interrupted(1, 'first'), rejected('a', 2, { reason: 'resumed' })]),
    ).toMatchObject({ attempt: 3, reason: 'validation_retry', keyAttempt: 3 });
    // So is the user's retry after a re-run.
    const retry = attempt('a', 3, {
      status: 'pending',
      reason: 'user_retry',
      result: null,
      validation: null,
    });
    expect(
      decide([interrupted(1, 'first'), rejected('a', 2, { reason: 'resumed' }), retry]),
    ).toMatchObject({ attempt: 3, reason: 'user_retry', keyAttempt: 3 });
  });

  it('synthesises when every stage is done', () => {
    const attempts = [attempt('a', 1), attempt('b', 1, { acceptedAt: at }), attempt('c', 1)];
    expect(decide(attempts)).toEqual({ kind: 'synthesize' });
    expect(stageResults(plan, attempts, policy)).toEqual(
      new Map([
        ['a', 'result of a#1'],
        ['b', 'result of b#1'],
        ['c', 'result of c#1'],
      ]),
    );
  });

  it('ignores attempts of stages a plan patch removed', () => {
    expect(decide([attempt('a', 1), attempt('gone', 1, { status: 'started' })])).toMatchObject({
      kind: 'run_stage',
      stage: { id: 'b' },
    });
  });
});

describe('buildPipelineView', () => {
  it('shows each stage’s status, attempts and latest result', () => {
    const view = buildPipelineView(
      { revision: 2, plan, attempts: [rejected('a', 1), attempt('a', 2), attempt('b', 1)] },
      policy,
      'open',
    );
    expect(view.revision).toBe(2);
    expect(view.next).toBe('await_review');
    expect(view.currentStageId).toBe('b');
    expect(
      view.stages.map((stage) => [stage.id, stage.status, stage.attempts.length, stage.result]),
    ).toEqual([
      ['a', 'completed', 2, 'result of a#2'],
      ['b', 'awaiting_review', 1, 'result of b#1'],
      ['c', 'pending', 0, null],
    ]);
    expect(view.stages[0]?.attempts[0]).toMatchObject({
      attempt: 1,
      status: 'failed',
      validation: { passed: false, findings: ['finding 1'] },
      accepted: false,
    });
  });

  it('a stage being retried is running; one out of retries is failed', () => {
    const running = buildPipelineView(
      { revision: 1, plan, attempts: [rejected('a', 1)] },
      policy,
      'open',
    );
    expect(running.stages[0]?.status).toBe('running');
    const failed = buildPipelineView(
      { revision: 1, plan, attempts: [rejected('a', 1), rejected('a', 2), rejected('a', 3)] },
      policy,
      'open',
    );
    expect(failed.stages[0]?.status).toBe('failed');
    expect(failed.next).toBe('stage_failed');
  });

  it('of an ended workflow: what its attempts say, the stages never run skipped, and next none', () => {
    const statuses = (attempts: StageAttempt[]) => {
      const view = buildPipelineView({ revision: 1, plan, attempts }, policy, 'ended');
      expect(view).toMatchObject({ next: 'none', currentStageId: null });
      return view.stages.map((stage) => stage.status);
    };
    // Ended by a budget before b (the early synthesis), or by a cancel at b's checkpoint.
    expect(statuses([attempt('a', 1)])).toEqual(['completed', 'skipped', 'skipped']);
    expect(statuses([attempt('a', 1), attempt('b', 1)])).toEqual([
      'completed',
      'completed',
      'skipped',
    ]);
    // Ended while a validation retry of a was due, or with a failed and waiting for review.
    expect(statuses([rejected('a', 1)])).toEqual(['failed', 'skipped', 'skipped']);
    expect(statuses([])).toEqual(['skipped', 'skipped', 'skipped']);
  });

  it('waiting for a failed synthesis’s retry: next synthesis_failed, no current stage, none to run', () => {
    const view = (attempts: StageAttempt[]) =>
      buildPipelineView({ revision: 1, plan, attempts }, policy, 'synthesis_failed');
    const done = [attempt('a', 1), attempt('b', 1, { acceptedAt: new Date() }), attempt('c', 1)];
    expect(view(done)).toMatchObject({ next: 'synthesis_failed', currentStageId: null });
    expect(view(done).stages.map((stage) => stage.status)).toEqual([
      'completed',
      'completed',
      'completed',
    ]);
    // A budget's synthesis after a: b and c never run, its retry answers without them.
    expect(view([attempt('a', 1)]).stages.map((stage) => stage.status)).toEqual([
      'completed',
      'skipped',
      'skipped',
    ]);
  });
});
