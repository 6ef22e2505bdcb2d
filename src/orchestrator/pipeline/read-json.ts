/**
 * Reads the JSON object a model was asked for out of its reply. Models
 * asked for JSON only still wrap it in a ```json fence or add a sentence
 * around it; both are accepted rather than costing a repair turn. The
 * object is the fenced block when there is one, else the text from the
 * first `{` to the last `}`.
 */

export type JsonRead =
  | { ok: true; value: Record<string, unknown> }
  | { ok: false; problem: string };

const FENCED = /```(?:json)?\s*\n([\s\S]*?)\n?\s*```/i;

export function readJsonObject(text: string): JsonRead {
  const fenced = FENCED.exec(text)?.[1];
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
  return { ok: true, value: value as Record<string, unknown> };
}
