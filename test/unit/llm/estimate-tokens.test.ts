import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  estimateRequestTokens,
  estimateTextTokens,
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

describe('estimateTextTokens on long runs without a break', () => {
  // Counted whole, a run costs the square of its length (100,000 letters: 3.5 s); in pieces it stays within ~1%.
  it('counts them in pieces, close to the exact count', () => {
    let seed = 7;
    const letter = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return String.fromCharCode(97 + (seed % 26));
    };
    const letters = Array.from({ length: 3_000 }, letter).join('');
    const mixed = `Intro text. ${' '.repeat(2_000)}${letters} and ${'-'.repeat(1_000)} the end.`;
    for (const text of [letters, mixed]) {
      const exact = countTokens(text);
      const estimate = estimateTextTokens(text, 'openai');
      expect(Math.abs(estimate - exact) / exact).toBeLessThan(0.02);
    }
  });
});
