import { z } from 'zod';
import type { Tool } from '../types.js';

/**
 * `ask_user`: the model asks the person behind the workflow a question.
 * It never runs: the tool loop sees `pauses`, persists its state, pauses
 * the workflow (`awaiting_input`, reason `clarification`) with a
 * `clarification_request` event built from these arguments, and resumes
 * with the answer as this call's result.
 */

export const QUESTION_TYPES = ['yes_no', 'multiple_choice', 'free_text'] as const;
export type QuestionType = (typeof QUESTION_TYPES)[number];

export const askUserParameters = z
  .object({
    question: z
      .string()
      .trim()
      .min(1)
      .max(2000)
      .describe('The question, as the user will read it.'),
    question_type: z
      .enum(QUESTION_TYPES)
      .describe('yes_no, multiple_choice (give options) or free_text.'),
    options: z
      .array(z.string().trim().min(1).max(200))
      .min(2)
      .max(10)
      .optional()
      .describe('The choices of a multiple_choice question, 2 to 10; only for multiple_choice.'),
    context: z
      .string()
      .trim()
      .max(2000)
      .optional()
      .describe('Why the question is asked, shown with it.'),
  })
  .superRefine((args, issues) => {
    if (args.question_type === 'multiple_choice' && args.options === undefined) {
      issues.addIssue({
        code: 'custom',
        path: ['options'],
        message: 'a multiple_choice question needs 2 to 10 options',
      });
    }
    if (args.question_type !== 'multiple_choice' && args.options !== undefined) {
      issues.addIssue({
        code: 'custom',
        path: ['options'],
        message: `options are only for multiple_choice questions, not ${args.question_type}`,
      });
    }
    const seen = new Set<string>();
    for (const [index, option] of (args.options ?? []).entries()) {
      const key = option.toLowerCase();
      if (seen.has(key)) {
        issues.addIssue({
          code: 'custom',
          path: ['options', index],
          message: `option "${option}" is given twice`,
        });
      }
      seen.add(key);
    }
  });

export type AskUserArguments = z.infer<typeof askUserParameters>;

export const askUserTool: Tool<typeof askUserParameters> = {
  name: 'ask_user',
  description:
    'Asks the user a question and waits for the answer, which comes back as this tool’s result. ' +
    'Use it only when the request is ambiguous or needs a decision you cannot make; ' +
    'prefer yes_no or multiple_choice when the possible answers are known.',
  parameters: askUserParameters,
  pauses: true,
  // Never enforced: a pausing tool is not run, and the wait for the user has no deadline.
  timeoutMs: 1000,
  async execute() {
    return {
      content:
        'ask_user is not run as a tool: the tool loop pauses the workflow and the user’s answer becomes this result.',
      isError: true,
    };
  },
};
