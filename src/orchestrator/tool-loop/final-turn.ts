import type { SystemPrompt } from '../../llm/types.js';

/**
 * The last turn after a budget cap (iterations, tokens or cost): no more
 * tools, answer from what the tool results gathered. The instruction goes in the volatile part so
 * the stable prefix stays cached.
 */
export const FINAL_TURN_INSTRUCTION =
  'The tool budget of this workflow is used up: no more tools can be called. Answer the question now, as well as you can, from what the tool results above gathered, and say what is missing or uncertain.';

export function buildFinalSystem(system: SystemPrompt): SystemPrompt {
  return {
    stable: system.stable,
    volatile: [system.volatile, FINAL_TURN_INSTRUCTION].filter(Boolean).join('\n'),
  };
}

/** When even the last turn gives no text, the answer says so rather than ending empty. */
export const NO_ANSWER_TEXT =
  'I could not finish answering within this workflow’s budget, and no partial answer could be produced.';
