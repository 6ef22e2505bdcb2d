import type { ExpectedOutput } from './expected-output.js';
import type { PlanStage } from './plan.js';
import { readJsonObject } from './read-json.js';

/**
 * The StageValidator: deterministic checks of a stage result, no model
 * call. A result must not be empty; when the stage declares
 * `expectedOutput`, it must have that shape (see expected-output.ts); when
 * it declares `consistentWith`, the top-level scalar fields it shares with
 * those earlier JSON results must hold the same values. Findings are
 * sentences addressed to the model, quoted to it when the stage is retried.
 */

export interface StageValidation {
  passed: boolean;
  findings: string[];
}

export interface ValidateStageOptions {
  stage: PlanStage;
  result: string;
  /** Earlier stages' results by stage id; a stage with no result is simply absent. */
  earlierResults: ReadonlyMap<string, string>;
  /** Titles in findings help the model find the stage it contradicts. */
  plan: { stages: readonly PlanStage[] };
}

export function validateStageResult(options: ValidateStageOptions): StageValidation {
  const findings = findingsOf(options);
  return { passed: findings.length === 0, findings };
}

function findingsOf(options: ValidateStageOptions): string[] {
  const { result, stage } = options;
  if (result.trim() === '') {
    return ['The result is empty: reply with the result the stage goal asks for.'];
  }
  const expected = stage.expectedOutput;
  if (!expected) return [];
  switch (expected.format) {
    case 'text':
      return missingMentions(result, expected);
    case 'list':
      return [...listFindings(result, expected), ...missingMentions(result, expected)];
    case 'json':
      return jsonFindings(options, expected);
  }
}

function missingMentions(result: string, expected: ExpectedOutput): string[] {
  const text = result.toLowerCase();
  const missing = (expected.fields ?? []).filter((field) => !text.includes(field.toLowerCase()));
  return missing.length === 0
    ? []
    : [`The result does not cover ${quoteAll(missing)}: address each of them by name.`];
}

/** `- item`, `* item`, `+ item`, `• item`, `1. item`, `1) item`, at the start of a line. */
const LIST_ITEM = /^[ \t]*(?:[-*+•]|\d+[.)])[ \t]+\S/;

/** A Markdown thematic break (`* * *`, `- - -`, `___`): a rule, not an item. */
const THEMATIC_BREAK = /^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$/;

/** A code fence's opening or closing line: what is between is code, not items. */
const FENCE = /^[ \t]*(?:```|~~~)/;

function countListItems(result: string): number {
  let items = 0;
  let inFence = false;
  for (const line of result.split('\n')) {
    if (FENCE.test(line)) inFence = !inFence;
    else if (!inFence && LIST_ITEM.test(line) && !THEMATIC_BREAK.test(line)) items += 1;
  }
  return items;
}

function listFindings(result: string, expected: ExpectedOutput): string[] {
  const wanted = expected.minItems ?? 1;
  const items = countListItems(result);
  if (items >= wanted) return [];
  return [
    `The result has ${items} list ${items === 1 ? 'item' : 'items'} but needs at least ${wanted}: one item per line, starting with "- " or "1. ".`,
  ];
}

function jsonFindings(options: ValidateStageOptions, expected: ExpectedOutput): string[] {
  const json = readJsonObject(options.result);
  if (!json.ok) {
    return [`The result must be one JSON object in a \`\`\`json block, but ${json.problem}.`];
  }
  const findings: string[] = [];
  // Own fields only: `constructor` or `valueOf` are on every object's prototype.
  const missing = (expected.fields ?? []).filter(
    (field) => !Object.hasOwn(json.value, field) || json.value[field] === null,
  );
  if (missing.length > 0) {
    findings.push(`The JSON object lacks the fields ${quoteAll(missing)} (or they are null).`);
  }
  for (const stageId of expected.consistentWith ?? []) {
    findings.push(...contradictions(options, json.value, stageId));
  }
  return findings;
}

/**
 * An earlier result that is missing or not JSON (a failed stage the user
 * chose to continue past) has nothing to compare, so it yields no finding:
 * the current stage cannot fix it.
 */
function contradictions(
  options: ValidateStageOptions,
  current: Record<string, unknown>,
  stageId: string,
): string[] {
  const earlierText = options.earlierResults.get(stageId);
  const earlier = earlierText === undefined ? undefined : readJsonObject(earlierText);
  if (!earlier?.ok) return [];
  const title = options.plan.stages.find((stage) => stage.id === stageId)?.title;
  const named = title ? `stage "${stageId}" (${title})` : `stage "${stageId}"`;
  const findings: string[] = [];
  for (const [field, value] of Object.entries(current)) {
    const before = earlier.value[field];
    if (!isScalar(value) || !isScalar(before) || sameScalar(value, before)) continue;
    findings.push(
      `Field "${field}" is ${JSON.stringify(value)} here but ${JSON.stringify(before)} in the result of ${named}: use the same value.`,
    );
  }
  return findings;
}

type Scalar = string | number | boolean;

function isScalar(value: unknown): value is Scalar {
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean';
}

/** 1000, "1000" and "1,000" agree; strings compare trimmed and case-insensitively. */
function sameScalar(a: Scalar, b: Scalar): boolean {
  const numberA = asNumber(a);
  const numberB = asNumber(b);
  if (numberA !== undefined && numberB !== undefined) return numberA === numberB;
  return String(a).trim().toLowerCase() === String(b).trim().toLowerCase();
}

const NUMBER_TEXT = /^\s*-?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?\s*$/;

function asNumber(value: Scalar): number | undefined {
  if (typeof value === 'number') return value;
  // Length first: the pattern is quadratic in it (60,000 digits took 4 s), and
  // no longer text is a number worth comparing as one.
  if (typeof value !== 'string' || value.length > 64) return undefined;
  // Commas only as thousands separators ("1,2,3" is not 123), an exponent allowed ("1e3" is 1000).
  if (!NUMBER_TEXT.test(value) || !/\d/.test(value)) return undefined;
  const number = Number(value.replace(/,/g, ''));
  return Number.isFinite(number) ? number : undefined;
}

function quoteAll(names: string[]): string {
  return names.map((name) => `"${name}"`).join(', ');
}
