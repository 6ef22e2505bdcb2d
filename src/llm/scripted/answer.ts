import type { ToolResultMessage } from '../types.js';
import { clip } from './conversation.js';

/** Every answer starts with this, so a user sees it came from the offline model. */
export const ANSWER_PREFIX = '[scripted model]';

/** Long tool output (a fetched page) is cut so the summary stays a summary. */
const MAX_RESULT_CHARS = 200;
const MAX_QUESTION_CHARS = 200;

/**
 * A tool result as the orchestrator puts it in the prompt
 * (tools/untrusted-output.ts): the opening tag, a line saying the block is
 * data, the data, the closing tag, and possibly a note after it (the
 * repeat-fail warning).
 */
const WRAPPED_RESULT = /^<tool_output\b[^>\n]*>\n[^\n]*\n([\s\S]*?)\n?<\/tool_output>/;

/** What the tool returned, read out of its block as a model reads it; other content as it is. */
function toolData(content: string): string {
  return WRAPPED_RESULT.exec(content)?.[1] ?? content;
}

/** Reports what the tools returned, one sentence per result, in call order. */
export function summariseToolResults(results: ToolResultMessage[]): string {
  const sentences = results.map((result) => {
    const content = clip(toolData(result.content), MAX_RESULT_CHARS) || '(empty result)';
    return result.isError
      ? `Using ${result.toolName} failed: ${content}`
      : `Using ${result.toolName}: ${content}`;
  });
  return `${ANSWER_PREFIX} ${sentences.join('\n')}`;
}

/** A short answer that echoes the question; the offline model knows nothing else. */
export function answerQuestion(question: string): string {
  const asked = clip(question, MAX_QUESTION_CHARS);
  if (!asked) return `${ANSWER_PREFIX} There is no question to answer yet.`;
  return (
    `${ANSWER_PREFIX} You asked: "${asked}". ` +
    'This is a deterministic answer from the offline model; configure a model provider for a real one.'
  );
}
