import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CLASSIFY_MARKER } from '../../../../src/llm/scripted/markers.js';
import { collect, finishOf, textOf } from './collect.js';

const classificationSchema = z.object({
  complexity: z.enum(['simple', 'complex']),
  reason: z.string().min(1),
});

async function classify(question: string) {
  const parts = await collect({
    system: { stable: `You route questions.\n${CLASSIFY_MARKER}\nAnswer with JSON.` },
    messages: [{ role: 'user', content: question }],
  });
  expect(finishOf(parts)).toBe('stop');
  return classificationSchema.parse(JSON.parse(textOf(parts)));
}

describe('scripted model: classification turns', () => {
  it('classifies a short factual question as simple, naming the length rule', async () => {
    const result = await classify('What is the capital of France?');
    expect(result.complexity).toBe('simple');
    expect(result.reason).toMatch(/length rule/);
  });

  it.each([
    ['Compare the GDP of France and Germany', 'compare'],
    ['Cross-reference the invoices with the orders', 'cross-reference'],
    ['Give me a summary table of the sales', 'summary table'],
    ['Pivot the data by region', 'pivot'],
    ['For each country list the capital', 'for each'],
    ['Step 1: load the data. Step 2: clean it.', 'step 1'],
    ['First fetch the page, then count the links', 'first ... then'],
  ])('classifies "%s" as complex by the %s rule', async (question, rule) => {
    const result = await classify(question);
    expect(result.complexity).toBe('complex');
    expect(result.reason).toContain(`'${rule}'`);
  });

  it('classifies a question of more than 40 words as complex by the length rule', async () => {
    const question = Array.from({ length: 45 }, (_, index) => `word${index}`).join(' ');
    const result = await classify(question);
    expect(result).toEqual({
      complexity: 'complex',
      reason: expect.stringMatching(/length rule: 45 words/),
    });
  });

  it('classifies the latest user message, not earlier ones', async () => {
    const parts = await collect({
      system: { stable: CLASSIFY_MARKER },
      messages: [
        { role: 'user', content: 'Compare these two reports' },
        { role: 'assistant', content: 'Done.', toolCalls: [] },
        { role: 'user', content: 'What time is it?' },
      ],
    });
    expect(JSON.parse(textOf(parts)).complexity).toBe('simple');
  });
});
