import { PLAN_MARKER } from '../../llm/scripted/markers.js';
import type { Message, SystemPrompt } from '../../llm/types.js';
import type { PlanLimits } from './plan.js';

/**
 * The planner's prompt. The stable part is the same for every workflow (so
 * providers' prompt caches hit it); the bounds and the tool names, which
 * vary with configuration and request, go in the volatile part. The marker
 * line makes the offline scripted model answer with a plan.
 */
const PLANNER_STABLE = [
  'You are the planner of Waymark, an assistant that answers questions with tools.',
  PLAN_MARKER,
  'The last user message is the question. Do not answer it: plan the work that answers it. Messages before it, if any, are the conversation so far: use them to understand what the question refers to.',
  'Each stage is run by an agent that sees the stage goal, this plan and the results of earlier stages, and may use tools. A final step writes the answer from all stage results, so do not add a stage that only restates earlier results.',
  '',
  'Reply with one JSON object and nothing else, of this shape:',
  // No `"dependsOn": []` here: a model copying the example into every stage would show each one no earlier result.
  '{"stages": [{"id": "stage-1", "title": "Short title", "goal": "What this stage must find or produce", "checkpoint": false, "expectedOutput": {"format": "text"}}, {"id": "stage-2", "title": "Short title", "goal": "What it builds from stage-1", "dependsOn": ["stage-1"], "checkpoint": false}]}',
  '',
  '- id: unique, 1-64 letters, digits, "-", "_" or ".".',
  '- title: a few words; goal: one or two sentences a capable agent can act on alone.',
  '- dependsOn (optional): ids of earlier stages whose results this stage needs; leave it out to give the stage every earlier result. Only earlier stages may be named.',
  '- tools (optional): names of the available tools the stage needs, the only ones it is offered ([] for none); leave it out to offer all of them.',
  '- checkpoint: true when a person should review the stage result before later stages build on it (for example gathered data the rest depends on). Use it sparingly.',
  '- expectedOutput (optional), checked automatically:',
  '  {"format": "text", "fields": [...]}: prose that mentions each field name;',
  '  {"format": "list", "minItems": n, "fields": [...]}: a Markdown list of at least n items;',
  '  {"format": "json", "fields": [...], "consistentWith": [...]}: a JSON object with those top-level fields; consistentWith names earlier "json" stages whose shared fields must keep their values.',
  'Use as few stages as the question needs: one per distinct piece of work.',
].join('\n');

export function plannerSystemPrompt(limits: PlanLimits): SystemPrompt {
  const tools = limits.toolNames ?? [];
  return {
    stable: PLANNER_STABLE,
    volatile: [
      `Plan at most ${limits.maxStages} stages.`,
      tools.length > 0
        ? `Available tools: ${[...tools].sort().join(', ')}.`
        : 'No tools are available: leave "tools" out.',
    ].join('\n'),
  };
}

/** Enough for the model to fix a broken plan; more only costs tokens. */
const MAX_QUOTED_ISSUES = 30;

/**
 * The repair turn: the invalid reply stays in the conversation (the model
 * fixes its own output rather than planning afresh) and the next user
 * message quotes what the validation found. A blank reply is no plan to fix
 * and no turn to show: Anthropic refuses a whitespace-only text block (its
 * adapter leaves it out), and "That plan" would then point at nothing.
 */
export function repairMessages(question: string, reply: string, issues: string[]): Message[] {
  if (reply.trim() === '') {
    return [
      { role: 'user', content: question },
      {
        role: 'user',
        content:
          'Your reply was empty. Reply with the plan: one JSON object of the shape described, and nothing else.',
      },
    ];
  }
  const quoted = issues.slice(0, MAX_QUOTED_ISSUES).map((issue) => `- ${issue}`);
  if (issues.length > MAX_QUOTED_ISSUES) {
    quoted.push(`- ... and ${issues.length - MAX_QUOTED_ISSUES} more problems`);
  }
  return [
    { role: 'user', content: question },
    { role: 'assistant', content: reply, toolCalls: [] },
    {
      role: 'user',
      content: [
        'That plan is invalid:',
        ...quoted,
        'Reply with the corrected plan: one JSON object of the shape described, and nothing else.',
      ].join('\n'),
    },
  ];
}
