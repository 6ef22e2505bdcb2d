import { ANSWER_PREFIX } from './answer.js';
import { clip } from './conversation.js';

/**
 * A pipeline's stage and synthesis turns as the scripted model reads them.
 * It knows the layout of their user messages
 * (orchestrator/pipeline/stage-prompt.ts and synthesis-prompt.ts) without
 * importing them, as `llm/` must not depend on `orchestrator/`; the unit
 * tests read messages built by those very builders, so a change to the
 * layout fails them.
 */

const MAX_GOAL_CHARS = 200;
const MAX_RESULT_CHARS = 200;
const MAX_QUESTION_CHARS = 200;

const GOAL_LINE = /^Goal: (.+)$/m;
/** The user's `modify` feedback: the lines after its heading, up to the next section. */
const FEEDBACK =
  /^Feedback from the user on an earlier result[^\n]*\n([\s\S]+?)(?:\n\n|$(?![\s\S]))/m;
const QUESTION_LINE = /^Question: (.+)$/m;
/** A `<stage_result>` block: its opening tag, the line naming the stage, the result, the closing tag. */
const STAGE_RESULT =
  /^<stage_result\b[^>\n]*>\nResult of stage [^\n]*? \(([^\n]*)\):\n([\s\S]*?)\n<\/stage_result>$/gm;

export interface StageTurn {
  goal: string;
  /** The user's feedback on an earlier result (`modify`), when the message has some. */
  feedback?: string;
}

/** The stage a stage turn carries out; undefined when the message names no goal. */
export function stageTurnOf(message: string): StageTurn | undefined {
  const goal = GOAL_LINE.exec(message)?.[1]?.trim();
  if (!goal) return undefined;
  const feedback = FEEDBACK.exec(message)?.[1]?.trim();
  return feedback ? { goal, feedback } : { goal };
}

/** A stage's result when no tool was called: the offline model can only say what it worked on. */
export function answerStage(stage: StageTurn): string {
  const following = stage.feedback
    ? `, following the feedback "${clip(stage.feedback, MAX_RESULT_CHARS)}"`
    : '';
  return (
    `${ANSWER_PREFIX} Worked on "${clip(stage.goal, MAX_GOAL_CHARS)}" offline${following}: ` +
    'no findings beyond the question itself.'
  );
}

/** The final answer: the question, then what each stage found, in plan order. */
export function synthesise(message: string): string {
  const question = clip(QUESTION_LINE.exec(message)?.[1] ?? '', MAX_QUESTION_CHARS);
  const found = [...message.matchAll(STAGE_RESULT)].map(([, title, result]) => {
    // A scripted stage's result carries the prefix too; the answer says it once.
    const trimmed = (result ?? '').trimStart();
    const text = trimmed.startsWith(ANSWER_PREFIX) ? trimmed.slice(ANSWER_PREFIX.length) : trimmed;
    return `- ${clip(title ?? '', MAX_GOAL_CHARS)}: ${clip(text, MAX_RESULT_CHARS) || '(empty result)'}`;
  });
  const intro = question ? `The answer to "${question}"` : 'The answer';
  const findings = found.length > 0 ? found.join('\n') : '- No stage produced a result.';
  return (
    `${ANSWER_PREFIX} ${intro}, put together offline from what the stages found:\n${findings}\n` +
    'Configure a model provider for a real answer.'
  );
}
