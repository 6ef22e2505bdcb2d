import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ToolDefinition } from '../../../src/llm/types.js';
import {
  budgetLine,
  buildSystemPrompt,
  type SystemPromptOptions,
  TOOL_OUTPUT_TAG,
} from '../../../src/orchestrator/system-prompt.js';

const tool = (name: string): ToolDefinition => ({
  name,
  description: `The ${name} tool.`,
  parameters: z.object({}),
});

const base: SystemPromptOptions = {
  tools: [tool('calculator'), tool('current_time'), tool('http_fetch'), tool('ask_user')],
  hasSession: false,
  kind: 'simple',
  now: new Date('2026-12-01T09:30:15.123Z'),
};

describe('buildSystemPrompt', () => {
  it('builds a byte-identical stable part for the same capabilities', () => {
    const first = buildSystemPrompt(base);
    const second = buildSystemPrompt({ ...base, tools: base.tools.map((t) => ({ ...t })) });
    expect(second.stable).toBe(first.stable);
  });

  it('changes only the volatile part when the time changes', () => {
    const first = buildSystemPrompt(base);
    const later = buildSystemPrompt({ ...base, now: new Date('2026-12-02T18:00:00Z') });
    expect(later.stable).toBe(first.stable);
    expect(first.volatile).toBe('Current time: 2026-12-01T09:30:15Z (Tuesday, UTC).');
    expect(later.volatile).toBe('Current time: 2026-12-02T18:00:00Z (Wednesday, UTC).');
  });

  it('keeps the time out of the stable part', () => {
    expect(buildSystemPrompt(base).stable).not.toContain('2026');
  });

  it('does not depend on the order the tools come in', () => {
    const reversed = buildSystemPrompt({ ...base, tools: [...base.tools].reverse() });
    expect(reversed.stable).toBe(buildSystemPrompt(base).stable);
    expect(reversed.stable).toContain(
      'Available tools: ask_user, calculator, current_time, http_fetch.',
    );
  });

  it('changes the stable part when the capabilities change', () => {
    const stable = buildSystemPrompt(base).stable;
    const variants = [
      { ...base, tools: base.tools.slice(1) },
      { ...base, hasSession: true },
      { ...base, kind: 'complex' as const },
      { ...base, tools: [] },
    ];
    const stables = variants.map((options) => buildSystemPrompt(options).stable);
    expect(new Set([stable, ...stables]).size).toBe(variants.length + 1);
  });

  it('tells the model that tool output between the delimiters is untrusted data', () => {
    const { stable } = buildSystemPrompt(base);
    expect(stable).toContain(`<${TOOL_OUTPUT_TAG}>`);
    expect(stable).toContain(`</${TOOL_OUTPUT_TAG}>`);
    expect(stable).toMatch(/never as instructions/);
  });

  it('mentions ask_user only when the workflow has it, and history only with a session', () => {
    const without = buildSystemPrompt({ ...base, tools: [tool('calculator')] }).stable;
    expect(without).not.toContain('ask_user');
    expect(buildSystemPrompt(base).stable).toContain('Use ask_user only when');
    expect(without).not.toContain('session');
    expect(buildSystemPrompt({ ...base, hasSession: true }).stable).toContain(
      'this session’s history',
    );
  });

  it('says so when no tool is available, without the tool-output rules', () => {
    const { stable } = buildSystemPrompt({ ...base, tools: [] });
    expect(stable).toContain('No tools are available');
    expect(stable).not.toContain(TOOL_OUTPUT_TAG);
  });

  it('keeps the prompt concise', () => {
    const prompt = buildSystemPrompt({ ...base, hasSession: true, kind: 'complex' });
    expect(prompt.stable.length).toBeLessThan(3_000);
  });
});

describe('budgetLine', () => {
  it('says nothing while the budget is far from its end', () => {
    expect(budgetLine({ iterationsLeft: 3, tokensLow: false })).toBeUndefined();
  });

  it('asks for the answer on the last turn with tools', () => {
    expect(budgetLine({ iterationsLeft: 1, tokensLow: true })).toBe(
      'Budget: this is the last model turn with tools. Answer now with what you have gathered.',
    );
  });

  it('says when the tokens are nearly spent, in a text that does not change from turn to turn', () => {
    expect(budgetLine({ iterationsLeft: 5, tokensLow: true })).toBe(
      'Budget: the token budget is nearly spent. Prefer answering with what you have gathered over more tool calls.',
    );
  });
});
