import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  estimateRequestTokens,
  upperBoundRequestTokens,
} from '../../../src/llm/estimate-tokens.js';
import type { ModelRequest } from '../../../src/llm/types.js';

const texts = [
  'Plain English prose, the kind most prompts are made of.',
  'Code: for (let i = 0; i < n; i++) { total += values[i] ** 2; }',
  '日本語のテキストと中文文本，还有한국어 텍스트.',
  'Emoji and symbols: 🚀🔥✨ → ≤ ≥ ∑ ∫ — “quotes”',
  'x'.repeat(5_000),
  ' \n\t '.repeat(300),
];

function requestOf(text: string): ModelRequest {
  return {
    system: { stable: `System: ${text}`, volatile: text.slice(0, 40) },
    messages: [
      { role: 'user', content: text },
      {
        role: 'assistant',
        content: text,
        toolCalls: [{ id: 'c1', name: 'calculator', arguments: { expression: text.slice(0, 20) } }],
      },
      { role: 'tool', toolCallId: 'c1', toolName: 'calculator', content: text },
    ],
    tools: [
      {
        name: 'calculator',
        description: text.slice(0, 100),
        parameters: z.object({ expression: z.string() }),
      },
    ],
  };
}

describe('upperBoundRequestTokens', () => {
  it.each(texts.map((text) => [text.slice(0, 30), text]))(
    'is never below the exact o200k count (%s…)',
    (_label, text) => {
      const request = requestOf(text);
      expect(upperBoundRequestTokens(request, 'openai')).toBeGreaterThanOrEqual(
        estimateRequestTokens(request, 'openai'),
      );
    },
  );

  it('is the estimate itself where the estimate is a character count', () => {
    const request = requestOf(texts[0] as string);
    expect(upperBoundRequestTokens(request, 'anthropic')).toBe(
      estimateRequestTokens(request, 'anthropic'),
    );
  });
});
