import { describe, expect, it } from 'vitest';
import { toolParametersJsonSchema, toToolCallPart } from '../../../src/llm/tool-arguments.js';
import { askUserParameters, askUserTool } from '../../../src/tools/builtins/ask-user.js';
import type { ToolContext } from '../../../src/tools/types.js';

function problems(args: unknown): string[] {
  const parsed = askUserParameters.safeParse(args);
  return parsed.success
    ? []
    : parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
}

describe('ask_user parameters', () => {
  it('accept each question type in its own shape', () => {
    expect(problems({ question: 'Ship it now?', question_type: 'yes_no' })).toEqual([]);
    expect(
      problems({ question: 'Which city?', question_type: 'free_text', context: 'Two match.' }),
    ).toEqual([]);
    expect(
      askUserParameters.parse({
        question: '  Which format? ',
        question_type: 'multiple_choice',
        options: [' CSV', 'JSON '],
      }),
    ).toEqual({
      question: 'Which format?',
      question_type: 'multiple_choice',
      options: ['CSV', 'JSON'],
    });
  });

  it('a multiple_choice question needs options, other types take none', () => {
    expect(problems({ question: 'Which?', question_type: 'multiple_choice' })).toEqual([
      'options: a multiple_choice question needs 2 to 10 options',
    ]);
    expect(
      problems({ question: 'Sure?', question_type: 'yes_no', options: ['yes', 'no'] }),
    ).toEqual(['options: options are only for multiple_choice questions, not yes_no']);
  });

  it('options number 2 to 10, distinct and non-empty', () => {
    const ask = (options: string[]) =>
      problems({ question: 'Which?', question_type: 'multiple_choice', options });
    expect(ask(['only'])).toHaveLength(1);
    expect(ask(Array.from({ length: 10 }, (_, i) => `option ${i}`))).toEqual([]);
    expect(ask(Array.from({ length: 11 }, (_, i) => `option ${i}`))).toHaveLength(1);
    expect(ask(['Red', 'red'])).toEqual(['options.1: option "red" is given twice']);
    expect(ask(['Red', '  '])).toHaveLength(1);
  });

  it('the question is required and bounded; the type is one of three', () => {
    expect(problems({ question: ' ', question_type: 'free_text' })).toHaveLength(1);
    expect(problems({ question: 'x'.repeat(2001), question_type: 'free_text' })).toHaveLength(1);
    expect(problems({ question: 'Why?', question_type: 'essay' })).toHaveLength(1);
    expect(problems({ question_type: 'yes_no' })).toHaveLength(1);
  });

  it('a model call with bad arguments comes back as tool-call-invalid with the reason', () => {
    const part = toToolCallPart(
      {
        id: 'c1',
        name: 'ask_user',
        rawArguments: '{"question":"Which?","question_type":"multiple_choice"}',
      },
      [askUserTool],
    );
    expect(part).toMatchObject({ type: 'tool-call-invalid' });
    expect(part.type === 'tool-call-invalid' && part.reason).toContain(
      'options: a multiple_choice question needs 2 to 10 options',
    );
  });

  it('is offered to the model as a JSON Schema object', () => {
    expect(toolParametersJsonSchema(askUserTool)).toMatchObject({
      type: 'object',
      required: ['question', 'question_type'],
      properties: {
        question_type: { enum: ['yes_no', 'multiple_choice', 'free_text'] },
        options: { type: 'array', minItems: 2, maxItems: 10 },
      },
    });
  });
});

describe('ask_user tool', () => {
  it('pauses, and its execute only explains that it is never run', async () => {
    expect(askUserTool.pauses).toBe(true);
    const ctx: ToolContext = {
      tenantId: 't',
      workflowId: 'w',
      step: 'turn-1',
      callId: 'c1',
      signal: new AbortController().signal,
    };
    const result = await askUserTool.execute({ question: 'Sure?', question_type: 'yes_no' }, ctx);
    expect(result.isError).toBe(true);
    expect(result.content).toContain('pauses the workflow');
  });
});
