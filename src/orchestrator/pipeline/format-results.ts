import { truncateMiddle } from '../../tools/untrusted-output.js';
import type { ExecutionPlan, PlanStage } from './plan.js';

/**
 * Stage results as they enter a later prompt. A result is model output
 * built from tool output, so it may carry injected instructions like the
 * tool output it came from: each one sits in a `<stage_result>` block the
 * system prompt declares to be data, with the tag defused inside it.
 */
export const STAGE_RESULT_TAG = 'stage_result';

const DELIMITER = new RegExp(`<(\\s*/?\\s*)(${STAGE_RESULT_TAG})`, 'gi');

/** The plan as a numbered outline; the same for every stage of a workflow, so it can sit in the stable prompt. */
export function planOverview(plan: ExecutionPlan): string {
  return plan.stages
    .map((stage, index) => {
      const after = stage.dependsOn?.length ? ` (uses ${stage.dependsOn.join(', ')})` : '';
      return `${index + 1}. [${stage.id}] ${stage.title}: ${stage.goal}${after}`;
    })
    .join('\n');
}

/** Each stage that has a result, in plan order, as a delimited block cut to about `maxChars`. */
export function formatStageResults(
  stages: readonly PlanStage[],
  results: ReadonlyMap<string, string>,
  maxChars: number,
): string[] {
  const blocks: string[] = [];
  for (const stage of stages) {
    const result = results.get(stage.id);
    if (result === undefined) continue;
    const { text } = truncateMiddle(result, maxChars);
    blocks.push(
      [
        `<${STAGE_RESULT_TAG} stage="${stage.id}">`,
        `Result of stage ${stage.id} (${stage.title}):`,
        text.replace(DELIMITER, '&lt;$1$2'),
        `</${STAGE_RESULT_TAG}>`,
      ].join('\n'),
    );
  }
  return blocks;
}
