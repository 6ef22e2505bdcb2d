import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { executeTool } from '../../../src/orchestrator/tool-loop/execute-tool.js';
import {
  callKey,
  createRepeatFailGuard,
} from '../../../src/orchestrator/tool-loop/repeat-guard.js';
import { messagesOfTurn, parseTurnState } from '../../../src/orchestrator/tool-loop/state.js';
import type { Tool } from '../../../src/tools/types.js';

const fixture = (name: string): unknown =>
  JSON.parse(readFileSync(new URL(`../../fixtures/${name}`, import.meta.url), 'utf8'));

describe('persisted loop state', () => {
  it('the frozen schemaVersion 1 fixture parses and rebuilds the turn’s messages', () => {
    const state = parseTurnState(fixture('loop-state-v1.json'));
    expect(state.turn).toBe(1);
    const messages = messagesOfTurn(state);
    expect(messages.map((message) => message.role)).toEqual(['assistant', 'tool', 'tool']);
    expect(messages[0]).toMatchObject({ toolCalls: [{ id: 'call_1' }, { id: 'call_2' }] });
    expect(messages[2]).toMatchObject({ toolCallId: 'call_2', isError: true });
  });

  it('an unknown schemaVersion is refused', () => {
    const state = { ...(fixture('loop-state-v1.json') as object), schemaVersion: 2 };
    expect(() => parseTurnState(state)).toThrow();
  });
});

describe('the repeat-fail guard', () => {
  it('keys ignore the order of argument keys', () => {
    expect(callKey('t', { a: 1, b: { c: 2, d: 3 } })).toBe(
      callKey('t', { b: { d: 3, c: 2 }, a: 1 }),
    );
    expect(callKey('t', { a: 1 })).not.toBe(callKey('u', { a: 1 }));
  });

  it('warns at the second identical failure and blocks the third attempt', () => {
    const guard = createRepeatFailGuard();
    const failure = { isError: true, content: 'boom' };
    expect(guard.isBlocked('t', { a: 1 })).toBe(false);
    expect(guard.record('t', { a: 1 }, failure)).toBe(false);
    expect(guard.record('t', { a: 1 }, failure)).toBe(true);
    expect(guard.isBlocked('t', { a: 1 })).toBe(true);
    expect(guard.isBlocked('t', { a: 2 })).toBe(false);
  });

  it('a different error or a success starts the count again', () => {
    const guard = createRepeatFailGuard();
    guard.record('t', {}, { isError: true, content: 'one' });
    expect(guard.record('t', {}, { isError: true, content: 'two' })).toBe(false);
    guard.record('t', {}, { isError: false, content: 'ok' });
    expect(guard.record('t', {}, { isError: true, content: 'two' })).toBe(false);
    expect(guard.isBlocked('t', {})).toBe(false);
  });
});

function hangingTool(timeoutMs: number, seen: { signal?: AbortSignal }): Tool {
  return {
    name: 'hang',
    description: 'never answers',
    parameters: z.object({}),
    timeoutMs,
    execute: (_args, ctx) => {
      seen.signal = ctx.signal;
      return new Promise(() => undefined);
    },
  };
}

const context = { tenantId: 't', workflowId: 'w', step: 'turn-1', callId: 'c' };

describe('executing one tool call', () => {
  it('a tool past its timeout gets an error result and its signal aborted', async () => {
    const seen: { signal?: AbortSignal } = {};
    const signal = new AbortController().signal;
    const execution = await executeTool({ tool: hangingTool(50, seen), args: {}, context, signal });
    expect(execution.outcome).toBe('timeout');
    expect(execution.result).toEqual({
      content: expect.stringMatching(/timed out/),
      isError: true,
    });
    expect(seen.signal?.aborted).toBe(true);
  });

  it('a stopped run interrupts the call with an error result', async () => {
    const seen: { signal?: AbortSignal } = {};
    const controller = new AbortController();
    const running = executeTool({
      tool: hangingTool(10_000, seen),
      args: {},
      context,
      signal: controller.signal,
    });
    controller.abort();
    const execution = await running;
    expect(execution.outcome).toBe('interrupted');
    expect(execution.result.isError).toBe(true);
  });

  it('a throwing tool is an error result, not a crash', async () => {
    const tool: Tool = {
      ...hangingTool(1000, {}),
      execute: async () => {
        throw new Error('kaput');
      },
    };
    const execution = await executeTool({
      tool,
      args: {},
      context,
      signal: new AbortController().signal,
    });
    expect(execution).toEqual({
      result: { content: expect.stringMatching(/kaput/), isError: true },
      outcome: 'failed',
    });
  });
});
