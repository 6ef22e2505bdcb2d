import type { WorkflowKind } from '../workflows/types.js';

/**
 * The keyword heuristic of complexity detection: a question that uses one
 * of these words or phrases asks for several dependent steps, which the
 * pipeline handles better than one tool loop.
 *
 * Matching rules, chosen so that a short word like "then" stays usable:
 * - whole words and phrases only: a keyword matches where it is not
 *   preceded or followed by a letter, a digit or `_` (so "then" does not
 *   match "authentication" or "thence", and "step 1" not "step 10");
 *   inflections are not guessed ("compare" does not match "comparison":
 *   list the forms you want);
 * - case-insensitive (Unicode-aware);
 * - inside a keyword, a space and a hyphen are the same separator and match
 *   any run of whitespace and hyphens ("cross-reference" matches
 *   "cross reference" and "Cross-Reference"), but never nothing: "for each"
 *   does not match "foreach", a word of its own in programming questions.
 */

/** The list used when CLASSIFY_COMPLEX_KEYWORDS is not set. */
export const DEFAULT_COMPLEX_KEYWORDS: readonly string[] = [
  'summary table',
  'pivot',
  'cross-reference',
  'compare',
  'for each',
  'step 1',
  'first find',
  'then',
];

export interface KeywordClassification {
  kind: WorkflowKind;
  /** Matched keywords as configured, in order of first appearance in the question. */
  matched: string[];
}

/** A keyword list compiled once (at startup), then matched against every question. */
export interface KeywordMatcher {
  /** The normalised keywords, deduplicated, in configured order. */
  readonly keywords: readonly string[];
  classify(input: string): KeywordClassification;
}

/** A hyphen-minus, the Unicode hyphens (U+2010, U+2011) and whitespace separate a keyword's parts. */
const SEPARATOR = String.raw`[\s\-\u2010\u2011]+`;
/** Letters, digits, `_` and combining marks: "comparé" spelled with U+0301 is one word, as its precomposed form is. */
const WORD_CHAR = String.raw`[\p{L}\p{M}\p{N}_]`;

/** Splits `CLASSIFY_COMPLEX_KEYWORDS`: comma-separated, blanks dropped, whitespace collapsed. */
export function parseKeywordList(text: string): string[] {
  return text
    .split(',')
    .map((keyword) => keyword.trim().replace(/\s+/g, ' '))
    .filter((keyword) => /[\p{L}\p{N}]/u.test(keyword));
}

export function compileKeywords(keywords: readonly string[]): KeywordMatcher {
  const unique = dedupe(keywords.map((keyword) => keyword.trim().replace(/\s+/g, ' ')));
  const patterns = unique.map((keyword) => ({ keyword, pattern: patternOf(keyword) }));
  return {
    keywords: unique,
    classify(input) {
      const hits: { keyword: string; index: number }[] = [];
      for (const { keyword, pattern } of patterns) {
        const index = input.search(pattern);
        if (index >= 0) hits.push({ keyword, index });
      }
      // A stable sort keeps the configured order for keywords found at the same place.
      const matched = hits.sort((a, b) => a.index - b.index).map((hit) => hit.keyword);
      return { kind: matched.length > 0 ? 'complex' : 'simple', matched };
    },
  };
}

function patternOf(keyword: string): RegExp {
  const parts = keyword.split(new RegExp(SEPARATOR, 'u')).filter(Boolean).map(escapeRegExp);
  return new RegExp(`(?<!${WORD_CHAR})${parts.join(SEPARATOR)}(?!${WORD_CHAR})`, 'iu');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/**
 * Drops duplicates (compared as matching compares: case and separators
 * ignored) and keywords without a letter or digit, which would match
 * everywhere.
 */
function dedupe(keywords: string[]): string[] {
  const seen = new Set<string>();
  return keywords.filter((keyword) => {
    const key = keyword.toLowerCase().replace(new RegExp(SEPARATOR, 'gu'), ' ');
    if (!/[\p{L}\p{N}]/u.test(key) || seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
