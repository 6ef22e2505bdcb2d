import { describe, expect, it } from 'vitest';
import { anthropicRefusal } from '../fakes/anthropic-request-checks.js';

/** The fake Anthropic API refuses what the real one does (test/fakes/anthropic-request-checks.ts). */

const toolUse = (id: string) => ({ type: 'tool_use', id, name: 'f', input: {} });
const toolResult = (id: string) => ({ type: 'tool_result', tool_use_id: id, content: 'ok' });

describe('the fake Anthropic API’s request checks', () => {
  it('takes a well-formed conversation', () => {
    expect(
      anthropicRefusal({
        system: [{ type: 'text', text: 'Be brief.' }],
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: [toolUse('call_0')] },
          { role: 'user', content: [toolResult('call_0')] },
          { role: 'assistant', content: [toolUse('call_0_2')] },
          { role: 'user', content: [toolResult('call_0_2')] },
        ],
      }),
    ).toBeUndefined();
  });

  it('refuses blank text, a bad or repeated tool_use id, and a tool_result without its call', () => {
    const cases: unknown[] = [
      { system: '  ', messages: [{ role: 'user', content: 'Hi' }] },
      { messages: [{ role: 'user', content: '\n\n' }] },
      {
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: [{ type: 'text', text: ' ' }, toolUse('a')] },
        ],
      },
      { messages: [{ role: 'assistant', content: [toolUse('functions.f:0')] }] },
      {
        messages: [
          { role: 'assistant', content: [toolUse('call_0')] },
          { role: 'user', content: [toolResult('call_0')] },
          { role: 'assistant', content: [toolUse('call_0')] },
        ],
      },
      { messages: [{ role: 'user', content: [toolResult('nowhere')] }] },
    ];
    for (const body of cases)
      expect(anthropicRefusal(body), JSON.stringify(body)).toBeTypeOf('string');
  });
});
