import { wordsOf } from './conversation.js';

export interface Classification {
  complexity: 'simple' | 'complex';
  reason: string;
}

/** Above this many words a question is taken to hold several asks at once. */
export const LONG_QUESTION_WORDS = 40;

interface ComplexityRule {
  name: string;
  pattern: RegExp;
}

/** Phrasings that ask for several dependent steps: the pipeline handles those better. */
const COMPLEXITY_RULES: ComplexityRule[] = [
  { name: 'compare', pattern: /\bcompar(?:e|es|ed|ing|ison|isons)\b/i },
  { name: 'cross-reference', pattern: /\bcross[- ]?referenc/i },
  { name: 'summary table', pattern: /\bsummary tables?\b/i },
  { name: 'pivot', pattern: /\bpivot/i },
  { name: 'for each', pattern: /\bfor (?:each|every)\b/i },
  { name: 'step 1', pattern: /\bstep\s*(?:1|one)\b/i },
  { name: 'first ... then', pattern: /\bfirst\b[\s\S]*\bthen\b/i },
];

/** Keyword heuristic: the reason names the rule that decided. */
export function classifyQuestion(question: string): Classification {
  const rule = COMPLEXITY_RULES.find((candidate) => candidate.pattern.test(question));
  if (rule) return { complexity: 'complex', reason: `matched the keyword rule '${rule.name}'` };
  const wordCount = wordsOf(question).length;
  if (wordCount > LONG_QUESTION_WORDS) {
    return {
      complexity: 'complex',
      reason: `matched the length rule: ${wordCount} words (more than ${LONG_QUESTION_WORDS})`,
    };
  }
  return {
    complexity: 'simple',
    reason: `no keyword rule matched and ${wordCount} words is within the length rule (at most ${LONG_QUESTION_WORDS})`,
  };
}
