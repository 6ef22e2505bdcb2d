/**
 * Marker lines the scripted model looks for in the stable system prompt to
 * tell a classification, planning, stage or synthesis turn from an ordinary
 * one. Prompt builders include them verbatim on a line of their own; a real
 * model just reads them as a plain instruction sentence.
 */
export const CLASSIFY_MARKER = 'Task: classify the complexity of the user question.';
export const PLAN_MARKER = 'Task: write an execution plan.';
export const STAGE_MARKER = 'Task: carry out one stage of a plan.';
export const SYNTHESIS_MARKER = 'Task: write the final answer from the stage results.';

/** True when a line of the prompt starts with the marker (surrounding whitespace ignored). */
export function hasMarker(prompt: string | undefined, marker: string): boolean {
  if (!prompt) return false;
  return prompt.split('\n').some((line) => line.trim().startsWith(marker));
}
