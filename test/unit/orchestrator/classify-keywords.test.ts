import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import {
  compileKeywords,
  DEFAULT_COMPLEX_KEYWORDS,
  parseKeywordList,
} from '../../../src/orchestrator/classify-keywords.js';

const defaults = compileKeywords(DEFAULT_COMPLEX_KEYWORDS);
const matched = (input: string) => defaults.classify(input).matched;

describe('keyword heuristic', () => {
  it('calls a question without any keyword simple', () => {
    expect(defaults.classify('What is the capital of France?')).toEqual({
      kind: 'simple',
      matched: [],
    });
  });

  it('calls a question with a keyword complex and names the keyword', () => {
    expect(defaults.classify('Compare the GDP of France and Spain')).toEqual({
      kind: 'complex',
      matched: ['compare'],
    });
  });

  it('matches whole words only: "then" is not found inside other words', () => {
    expect(matched('How does authentication work?')).toEqual([]);
    expect(matched('Whence and thence did they travel?')).toEqual([]);
    expect(matched('Is pivotal research done here?')).toEqual([]);
    expect(matched('Go to step 10 of the guide')).toEqual([]);
    expect(matched('The comparer class in C#')).toEqual([]);
    expect(matched('a then_value variable')).toEqual([]);
  });

  it('matches at the edges of the text and next to punctuation', () => {
    expect(matched('then')).toEqual(['then']);
    expect(matched('Find it, then stop.')).toEqual(['then']);
    expect(matched('(pivot)')).toEqual(['pivot']);
    expect(matched('Step 1: gather the data')).toEqual(['step 1']);
  });

  it('ignores case', () => {
    expect(matched('COMPARE these')).toEqual(['compare']);
    expect(matched('Make A Summary Table')).toEqual(['summary table']);
  });

  it('treats a space and a hyphen in a keyword as the same separator', () => {
    for (const text of [
      'cross-reference the lists',
      'cross reference the lists',
      'Cross-Reference the lists',
      'cross - reference the lists',
      'cross\u2010reference the lists',
    ]) {
      expect(matched(text), text).toEqual(['cross-reference']);
    }
    expect(matched('For-each row, add a note')).toEqual(['for each']);
    expect(matched('for\n  each row')).toEqual(['for each']);
    expect(matched('a summary-table please')).toEqual(['summary table']);
  });

  it('never matches a phrase written as one word', () => {
    expect(matched('How do I use foreach in PHP?')).toEqual([]);
    expect(matched('crossreference')).toEqual([]);
  });

  it('does not inflect: other forms of a word are listed explicitly when wanted', () => {
    expect(matched('a comparison of two cars')).toEqual([]);
    const withForms = compileKeywords(['compare', 'comparison']);
    expect(withForms.classify('a comparison of two cars').matched).toEqual(['comparison']);
  });

  it('lists every matched keyword once, in order of appearance', () => {
    expect(
      matched('For each city, first find the population, then compare them; then pivot'),
    ).toEqual(['for each', 'first find', 'then', 'compare', 'pivot']);
  });

  it('matches keywords holding regular-expression characters literally', () => {
    const matcher = compileKeywords(['c++', 'a.b', '(x)']);
    expect(matcher.classify('templates in c++ and a.b').matched).toEqual(['c++', 'a.b']);
    expect(matcher.classify('c++x axb x').matched).toEqual([]);
    expect(matcher.classify('solve (x) now').matched).toEqual(['(x)']);
  });

  it('drops duplicate and empty keywords', () => {
    const matcher = compileKeywords([
      'Compare',
      'compare',
      'cross reference',
      'cross-reference',
      '-',
      '',
    ]);
    expect(matcher.keywords).toEqual(['Compare', 'cross reference']);
    expect(matcher.classify('anything at all').kind).toBe('simple');
  });
});

describe('CLASSIFY_COMPLEX_KEYWORDS', () => {
  it('parses a comma-separated list, trimming and collapsing spaces', () => {
    expect(parseKeywordList(' versus ,  side   by side,, ')).toEqual(['versus', 'side by side']);
  });

  it('replaces the default list', () => {
    const config = loadConfig({ CLASSIFY_COMPLEX_KEYWORDS: 'versus, side by side' });
    expect(config.CLASSIFY_COMPLEX_KEYWORDS).toEqual(['versus', 'side by side']);
    const matcher = compileKeywords(config.CLASSIFY_COMPLEX_KEYWORDS ?? []);
    expect(matcher.classify('Compare A and B, then C').kind).toBe('simple');
    expect(matcher.classify('Cats versus dogs, side-by-side').matched).toEqual([
      'versus',
      'side by side',
    ]);
  });

  it('is unset by default, so the default list applies', () => {
    expect(loadConfig({}).CLASSIFY_COMPLEX_KEYWORDS).toBeUndefined();
  });

  it('rejects a list with no keyword in it', () => {
    expect(() => loadConfig({ CLASSIFY_COMPLEX_KEYWORDS: ' , ,' })).toThrow(
      /CLASSIFY_COMPLEX_KEYWORDS: expected at least one keyword/,
    );
  });
});

describe('keyword heuristic: combining marks belong to the word they follow', () => {
  it('decides the same for a question in NFC and in NFD (decomposed accents)', () => {
    // "comparé" (French, "compared"): in NFD its last letter is "e" + U+0301,
    // and the combining accent, not being \p{L}, counts as a word boundary.
    for (const text of ['Le prix est comparé', 'un écompare']) {
      expect(defaults.classify(text).matched, text).toEqual([]);
      expect(defaults.classify(text.normalize('NFD')).matched, `${text} (NFD)`).toEqual([]);
    }
  });

  it('does not match a configured Devanagari keyword inside a longer word', () => {
    // "फिर" (then) is not a word of its own in "फिरा" (turned): the vowel sign
    // U+093E that follows it is a combining mark (\p{Mc}), not a boundary.
    const hindi = compileKeywords(['फिर']);
    expect(hindi.classify('फिर से').matched).toEqual(['फिर']);
    expect(hindi.classify('वह घर फिरा').matched).toEqual([]);
  });
});
