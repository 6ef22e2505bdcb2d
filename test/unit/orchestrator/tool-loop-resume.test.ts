import { describe, expect, it } from 'vitest';
import { startLoopRun } from '../../../src/orchestrator/tool-loop/loop.js';
import { REPEAT_WARNING } from '../../../src/orchestrator/tool-loop/repeat-guard.js';
import {
  answerKey,
  type LoopResume,
  restoreLoop,
} from '../../../src/orchestrator/tool-loop/resume.js';
import type { TurnState } from '../../../src/orchestrator/tool-loop/state.js';
import type { LoopOptions, LoopRun } from '../../../src/orchestrator/tool-loop/types.js';

/** Rebuilding a tool loop from its persisted turns, as a resumed run does. */

/** A loop run as runToolLoop starts it; restoreLoop reads only the options named here. */
function freshRun(maxIterations = 10): LoopRun {
  const options = {
    messages: [{ role: 'user', content: 'What is 6 * 7?' }],
    budget: { maxIterations, maxTokens: null, maxCostUsd: null },
    spentBefore: { tokens: 0, costUsd: 0 },
  } as unknown as LoopOptions; // only these fields are read by restoreLoop
  return startLoopRun(options);
}

function turn(number: number, overrides: Partial<TurnState> = {}): TurnState {
  return {
    schemaVersion: 1,
    turn: number,
    model: 'gpt',
    assistant: {
      content: '',
      toolCalls: [{ id: `call_${number}`, name: 'calculator', arguments: { expression: '6 * 7' } }],
    },
    toolResults: [
      { toolCallId: `call_${number}`, toolName: 'calculator', content: '42', isError: false },
    ],
    awaiting: null,
    finishReason: 'tool_calls',
    ...overrides,
  };
}

/** `answers`: [step, call id, answer], as the `clarification_answer` events say. */
const resume = (turns: TurnState[], answers: [string, string, string][] = []): LoopResume => ({
  turns,
  answers: new Map(answers.map(([step, callId, answer]) => [answerKey(step, callId), answer])),
  approvals: new Map(),
});

describe('restoreLoop', () => {
  it('rebuilds the conversation and the counts, and goes on with the next turn', () => {
    const run = freshRun();
    const step = restoreLoop(run, resume([turn(1), turn(2)]));
    expect(step).toEqual({ kind: 'call_model' });
    expect(run.turns).toBe(2);
    expect(run.iterations).toBe(2);
    expect(run.messages.map((message) => message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'assistant',
      'tool',
    ]);
  });

  it('puts the user’s answer after the turn that asked, as the question’s result', () => {
    const asked = turn(1, {
      assistant: {
        content: '',
        toolCalls: [
          { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
          { id: 'call_q', name: 'ask_user', arguments: { question: 'Which?' } },
        ],
      },
      toolResults: [
        { toolCallId: 'call_sum', toolName: 'calculator', content: '2', isError: false },
      ],
      awaiting: { toolCallId: 'call_q', toolName: 'ask_user' },
    });
    const run = freshRun();
    expect(restoreLoop(run, resume([asked], [['turn-1', 'call_q', 'Oslo']]))).toEqual({
      kind: 'call_model',
    });
    expect(run.messages.at(-1)).toEqual({
      role: 'tool',
      toolCallId: 'call_q',
      toolName: 'ask_user',
      content: 'The user answered: Oslo',
      isError: false,
    });
  });

  it('an answer belongs to the turn that asked: a later question with the same call id is asked again', () => {
    const question = (number: number, text: string) =>
      turn(number, {
        assistant: {
          content: '',
          toolCalls: [{ id: 'call_0', name: 'ask_user', arguments: { question: text } }],
        },
        toolResults: [],
        awaiting: { toolCallId: 'call_0', toolName: 'ask_user' },
      });
    const run = freshRun();
    const step = restoreLoop(
      run,
      resume([question(1, 'Which city?'), question(2, 'Celsius?')], [['turn-1', 'call_0', 'Oslo']]),
    );
    // Resolved from the decisions (held-calls.ts): there is none, so it pauses again.
    expect(step).toMatchObject({
      kind: 'resolve_held',
      turn: { held: [{ arguments: { question: 'Celsius?' } }], results: [] },
    });
    expect(run.messages.filter((message) => message.role === 'tool')).toEqual([
      expect.objectContaining({ toolCallId: 'call_0', content: 'The user answered: Oslo' }),
    ]);
  });

  it('a question persisted but never paused on is asked again', () => {
    const asked = turn(1, {
      assistant: {
        content: '',
        toolCalls: [{ id: 'call_q', name: 'ask_user', arguments: { question: 'Which?' } }],
      },
      toolResults: [],
      awaiting: { toolCallId: 'call_q', toolName: 'ask_user' },
    });
    expect(restoreLoop(freshRun(), resume([asked]))).toMatchObject({
      kind: 'resolve_held',
      turn: { held: [{ id: 'call_q', name: 'ask_user' }] },
    });
  });

  it('a turn whose call waits for approval goes on to resolve it, after the results it has; a turn after it is refused', () => {
    const waiting = turn(1, {
      assistant: {
        content: '',
        toolCalls: [
          { id: 'call_b', name: 'pay', arguments: { amount: 2 } },
          { id: 'call_sum', name: 'calculator', arguments: { expression: '1 + 1' } },
          { id: 'call_a', name: 'pay', arguments: { amount: 1 } },
        ],
      },
      toolResults: [
        { toolCallId: 'call_sum', toolName: 'calculator', content: '2', isError: false },
        { toolCallId: 'call_b', toolName: 'pay', content: 'paid', isError: false },
      ],
      awaiting: { toolCallId: 'call_a', toolName: 'pay' },
    });
    const run = freshRun();
    expect(restoreLoop(run, resume([waiting]))).toMatchObject({
      kind: 'resolve_held',
      turn: {
        held: [{ id: 'call_a' }],
        results: [{ toolCallId: 'call_sum' }, { toolCallId: 'call_b' }],
      },
    });
    // The resolution appends the rest: the conversation has the turn as persisted.
    expect(run.messages.filter((message) => message.role === 'tool')).toHaveLength(2);
    const followed = () => restoreLoop(freshRun(), resume([waiting, turn(2)]));
    expect(followed).toThrow(/turn 1 has calls without results, and a turn follows it/);
  });

  it('an answering turn persisted before the workflow ended finishes with its text, without a new turn', () => {
    const answered = turn(2, {
      assistant: { content: 'It is 42.', toolCalls: [] },
      toolResults: [],
      finishReason: 'stop',
    });
    expect(restoreLoop(freshRun(), resume([turn(1), answered]))).toEqual({
      kind: 'finished',
      answer: 'It is 42.',
      reason: 'answered',
    });
  });

  it('an answering turn after the iteration cap finishes with the cap as its reason', () => {
    const answered = turn(2, {
      assistant: { content: 'Best effort.', toolCalls: [] },
      toolResults: [],
      finishReason: 'stop',
    });
    expect(restoreLoop(freshRun(1), resume([turn(1), answered]))).toMatchObject({
      kind: 'finished',
      reason: 'iteration_cap',
    });
  });

  it('the repeat-fail guard remembers failures from before: the third identical failing call stays blocked', () => {
    const failing = (number: number, warned: boolean): TurnState =>
      turn(number, {
        assistant: {
          content: '',
          toolCalls: [
            { id: `call_${number}`, name: 'calculator', arguments: { expression: '1/0' } },
          ],
        },
        toolResults: [
          {
            toolCallId: `call_${number}`,
            toolName: 'calculator',
            content: `division by zero${warned ? `\n${REPEAT_WARNING}` : ''}`,
            isError: true,
          },
        ],
      });
    const run = freshRun();
    restoreLoop(run, resume([failing(1, false), failing(2, true)]));
    expect(run.guard.isBlocked('calculator', { expression: '1/0' })).toBe(true);
    expect(run.guard.isBlocked('calculator', { expression: '2/1' })).toBe(false);
  });
});
