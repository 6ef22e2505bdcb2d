import { findUnsupportedJson, storableText } from '../../json-limits.js';

/**
 * Reads the JSON object a model was asked for out of its reply. Models
 * asked for JSON only still wrap it in a ```json fence or add a sentence
 * around it; both are accepted rather than costing a repair turn. The
 * object is the first ```json block, else the first plain fenced block,
 * else the text from the first `{` to the last `}`. A value PostgreSQL
 * could not store (a NUL or a lone surrogate, from an escape) or nesting
 * past MAX_JSON_DEPTH is a problem, as a syntax error is: the caller's
 * repair turn can mend it, where writing it would fail the workflow.
 */

export type JsonRead =
  | { ok: true; value: Record<string, unknown> }
  | { ok: false; problem: string };

const FENCE = '```';
/** Fences looked at: a reply made of fences alone is not worth scanning further. */
const MAX_FENCES = 64;

export function readJsonObject(text: string): JsonRead {
  const fenced = fencedBlock(text);
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  const candidate = fenced ?? (start >= 0 && end > start ? text.slice(start, end + 1) : undefined);
  if (candidate === undefined) return { ok: false, problem: 'the reply contains no JSON object' };
  let value: unknown;
  try {
    value = JSON.parse(candidate);
  } catch (error) {
    return { ok: false, problem: `the JSON does not parse: ${(error as Error).message}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { ok: false, problem: 'the JSON is not an object' };
  }
  const unsupported = findUnsupportedJson(value, candidate, { nul: true });
  if (unsupported) {
    const at = storableText(unsupported.path.join('.')) || '(the object)';
    const what =
      unsupported.kind === 'depth'
        ? 'nests too deep'
        : unsupported.kind === 'nul'
          ? 'has a NUL character (\\u0000)'
          : 'has a lone UTF-16 surrogate escape, which is not text';
    return { ok: false, problem: `the JSON ${what} at ${at}` };
  }
  return { ok: true, value: value as Record<string, unknown> };
}

/**
 * The content of the first fenced block whose opening line is ```json,
 * else of the first plain ``` one, up to the next fence; blocks of other
 * languages are skipped, and a plain block (a table, a sketch) before the
 * ```json block asked for does not hide it. Found with indexOf: the
 * regular expression it replaces backtracked in cubic time (a
 * 3,000-character reply of newlines after a fence held the replica's event
 * loop for 10 s).
 */
function fencedBlock(text: string): string | undefined {
  let plain: string | undefined;
  let open = text.indexOf(FENCE);
  for (let seen = 0; open >= 0 && seen < MAX_FENCES; seen++) {
    const lineEnd = text.indexOf('\n', open + FENCE.length);
    if (lineEnd < 0) break;
    const info = text
      .slice(open + FENCE.length, lineEnd)
      .trim()
      .toLowerCase();
    const close = text.indexOf(FENCE, lineEnd + 1);
    if (close < 0) break;
    const content = text.slice(lineEnd + 1, close);
    if (info === 'json') return content;
    if (info === '') plain ??= content;
    // The next fence after this block's end.
    open = text.indexOf(FENCE, close + FENCE.length);
  }
  return plain;
}
