/** A tool call the rules want to make, before its arguments are validated. */
export interface PlannedToolCall {
  name: string;
  rawArguments: string;
}

/** Bounds the fan-out when a message lists many links. */
const MAX_FETCHES = 3;

export const CLARIFYING_QUESTION = 'Could you tell me more about what you need?';

const URL_PATTERN = /https?:\/\/[^\s<>"'`)\]}]+/gi;
const OPERAND = String.raw`\(*\s*-?\d+(?:\.\d+)?\s*\)*`;
const OPERATOR = '[-+*/^%×÷]';
const EXPRESSION = new RegExp(String.raw`${OPERAND}(?:\s*${OPERATOR}\s*${OPERAND})+`, 'g');
/** `2024-05-01` or `3-4 sentences` read as a date or a range, not as a subtraction. */
const HYPHENATED_NUMBERS = /^\d+(?:-\d+)+$/;
const ASKS_FOR_TIME = [
  /\bwhat(?:'s| is)?\s+(?:the\s+)?(?:current\s+)?(?:time|date|day)\b/i,
  /\b(?:current|local)\s+(?:time|date|day)\b/i,
  /\btime\s+is\s+it\b/i,
  /\bday\s+(?:is\s+it|of\s+the\s+week)\b/i,
  /\btoday'?s?\s+date\b/i,
  /\bwhat\s+year\b/i,
  /\bwhat(?:'s|\s+is)\s+today\b/i,
];
/**
 * Requests with nothing to act on, which the model answers with a question.
 * Only these: a short message is usually a question of its own ("hi",
 * "Stream it") and gets an answer.
 */
const VAGUE_PHRASES =
  /^(?:help|help me|can you help(?: me)?|i need help|something|anything)[.!?]*$/i;

/**
 * The tool calls the scripted model makes for a user message, in a fixed
 * order. Each rule fires only when its tool is offered; `ask_user` only
 * for a request with nothing to act on (`VAGUE_PHRASES`) and no other call.
 */
export function toolCallsFor(text: string, offered: ReadonlySet<string>): PlannedToolCall[] {
  const calls: PlannedToolCall[] = [];
  const call = (name: string, args: Record<string, unknown>) =>
    calls.push({ name, rawArguments: JSON.stringify(args) });

  const urls = findUrls(text);
  const withoutUrls = text.replace(URL_PATTERN, ' ');
  if (offered.has('calculator')) {
    const expression = findExpression(withoutUrls);
    if (expression) call('calculator', { expression });
  }
  if (offered.has('current_time') && ASKS_FOR_TIME.some((pattern) => pattern.test(withoutUrls))) {
    call('current_time', {});
  }
  if (offered.has('http_fetch')) {
    for (const url of urls.slice(0, MAX_FETCHES)) call('http_fetch', { url });
  }
  if (offered.has('ask_user') && calls.length === 0 && isVague(text)) {
    call('ask_user', { question: CLARIFYING_QUESTION, question_type: 'free_text' });
  }
  return calls;
}

function findUrls(text: string): string[] {
  const urls = (text.match(URL_PATTERN) ?? []).map((url) => url.replace(/[.,;:!?]+$/, ''));
  return [...new Set(urls)];
}

/** The first arithmetic expression in the text: numbers joined by operators, parentheses balanced. */
export function findExpression(text: string): string | undefined {
  for (const match of text.matchAll(EXPRESSION)) {
    const expression = balanceParentheses(match[0].trim())
      .replace(/×/g, '*')
      .replace(/÷/g, '/')
      .replace(/\s+/g, ' ');
    if (!HYPHENATED_NUMBERS.test(expression)) return expression;
  }
  return undefined;
}

/** Drops unmatched parentheses at the edges, which the pattern picks up from prose. */
function balanceParentheses(expression: string): string {
  let result = expression;
  const count = (char: string) => result.split(char).length - 1;
  while (count(')') > count('(') && result.endsWith(')')) result = result.slice(0, -1).trimEnd();
  while (count('(') > count(')') && result.startsWith('(')) result = result.slice(1).trimStart();
  return result;
}

function isVague(text: string): boolean {
  return VAGUE_PHRASES.test(text.trim());
}
