import { describe, expect, it } from 'vitest';
import {
  ExpressionError,
  evaluateExpression,
  formatNumber,
  MAX_EXPRESSION_LENGTH,
  MAX_NESTING_DEPTH,
} from '../../../src/tools/builtins/arithmetic.js';
import { calculatorTool } from '../../../src/tools/builtins/calculator.js';
import type { ToolContext } from '../../../src/tools/types.js';

const ctx: ToolContext = {
  tenantId: 't',
  workflowId: 'w',
  step: 'turn-1',
  callId: 'c1',
  signal: new AbortController().signal,
};

function errorOf(expression: string): ExpressionError {
  try {
    evaluateExpression(expression);
  } catch (error) {
    if (error instanceof ExpressionError) return error;
    throw error;
  }
  throw new Error(`"${expression}" evaluated without an error`);
}

// Values worked out by hand or from well-known constants, not by this parser.
const KNOWN_VALUES: [string, number][] = [
  ['1 + 2 * 3', 7],
  ['(1 + 2) * 3', 9],
  ['10 - 4 - 3', 3],
  ['100 / 10 / 5', 2],
  ['2 * 3 % 4', 2],
  ['7 % 3', 1],
  ['-7 % 3', -1],
  ['2 ^ 3 ^ 2', 512],
  ['(2 ^ 3) ^ 2', 64],
  ['-2 ^ 2', -4],
  ['(-2) ^ 2', 4],
  ['2 ^ -1', 0.5],
  ['2 ** 10', 1024],
  ['--3', 3],
  ['-+-3', 3],
  ['1 - -1', 2],
  ['2 * -3', -6],
  ['.5 + 1.', 1.5],
  ['1.5e3 + 2E-2', 1500.02],
  ['6.02e+23 / 1e23', 6.02],
  ['sqrt(144)', 12],
  ['abs(-4.25)', 4.25],
  ['round(2.5)', 3],
  ['round(-2.5)', -3],
  ['round(3.14159, 2)', 3.14],
  ['round(1.005, 2)', 1.01],
  ['round(1234, -2)', 1200],
  ['floor(-1.5)', -2],
  ['ceil(-1.5)', -1],
  ['min(4, -2, 9)', -2],
  ['max(4, -2, 9)', 9],
  ['log(1000)', 3],
  ['log(81, 3)', 4],
  ['ln(e ^ 2)', 2],
  ['exp(0)', 1],
  ['sin(pi / 2)', 1],
  ['cos(pi)', -1],
  ['tan(pi / 4)', 1],
  ['pi', Math.PI],
  ['e', Math.E],
  ['PI * 2', 2 * Math.PI],
  ['3 \u00d7 4 \u00f7 2 \u2212 1', 5],
  ['((((7))))', 7],
  ['  1 +\t2\n', 3],
  ['0.1 + 0.2', 0.3],
  ['sqrt(2) ^ 2', 2],
  ['1 / 3 * 3', 1],
  ['max(1, min(2, 3), 2 ^ 0.5)', 2],
];

describe('calculator arithmetic', () => {
  it.each(KNOWN_VALUES)('%s = %d', (expression, expected) => {
    const value = evaluateExpression(expression);
    // Within a relative 1e-12: trigonometry and logarithms carry binary rounding.
    expect(Math.abs(value - expected)).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(expected)));
  });

  it('formats integers as such and hides binary noise in fractions', () => {
    expect(formatNumber(evaluateExpression('2^53'))).toBe('9007199254740992');
    expect(formatNumber(evaluateExpression('0.1 + 0.2'))).toBe('0.3');
    expect(formatNumber(evaluateExpression('1 / 3'))).toBe('0.333333333333333');
    expect(formatNumber(evaluateExpression('1e25'))).toBe('1e+25');
    expect(formatNumber(evaluateExpression('-0'))).toBe('0');
  });

  it.each([
    ['1 +', 3, 'expression ends too early'],
    ['(1 + 2', 6, 'missing ")" for the "(" opened at position 1'],
    ['1 + 2)', 5, 'unexpected ")" (no matching "(")'],
    ['2 pi', 2, 'unexpected "pi" (missing operator? write * to multiply)'],
    ['2 (3)', 2, 'unexpected "(" (missing operator? write * to multiply)'],
    ['1 $ 2', 2, 'unexpected character "$"'],
    ['* 2', 0, 'unexpected "*"'],
    ['foo(1)', 0, 'unknown name "foo"'],
    ['sqrt 4', 0, 'sqrt needs its arguments in parentheses'],
    ['pi(2)', 0, 'pi is a constant, not a function'],
    ['1 + sqrt(1, 2)', 4, 'sqrt takes 1 argument, got 2'],
    ['min()', 0, 'min takes at least 1 argument, got 0'],
    ['round(1, 2, 3)', 0, 'round takes 1 or 2 arguments, got 3'],
    ['round(1, 0.5)', 0, 'round takes a whole number of digits from -15 to 15'],
    ['max(1,)', 6, 'unexpected ")"'],
    ['5 / (2 - 2)', 2, 'division by zero'],
    ['5 % 0', 2, 'remainder of a division by zero'],
    ['3 + sqrt(-4)', 4, 'square root of a negative number'],
    ['ln(0)', 0, 'logarithm of a number that is not positive'],
    ['log(8, 1)', 0, 'logarithm base must be positive and not 1'],
    ['10 ^ 400', 3, 'result is too large'],
    ['1e308 * 10', 6, 'result is too large'],
    ['exp(1000)', 0, 'result is too large'],
    ['(-8) ^ (1/3)', 5, 'result is not a real number'],
    ['1e999', 0, 'number too large'],
    ['', 0, 'empty expression'],
  ])('"%s" fails at index %i: %s', (expression, position, reason) => {
    const error = errorOf(expression);
    expect(error.position).toBe(position);
    expect(error.reason).toContain(reason);
    expect(error.message).toBe(`at position ${position + 1}: ${error.reason}`);
  });

  it(`refuses input longer than ${MAX_EXPRESSION_LENGTH} characters`, () => {
    const longest = `1${'+1'.repeat((MAX_EXPRESSION_LENGTH - 1) / 2)}`;
    expect(longest).toHaveLength(MAX_EXPRESSION_LENGTH - (MAX_EXPRESSION_LENGTH % 2 === 0 ? 1 : 0));
    expect(evaluateExpression(longest)).toBe((longest.length + 1) / 2);
    expect(errorOf(`${longest}+1`).reason).toContain('longer than 500 characters');
  });

  it(`refuses nesting deeper than ${MAX_NESTING_DEPTH} levels, parentheses or signs`, () => {
    const nested = (depth: number) => `${'('.repeat(depth)}1${')'.repeat(depth)}`;
    expect(evaluateExpression(nested(MAX_NESTING_DEPTH - 1))).toBe(1);
    expect(errorOf(nested(MAX_NESTING_DEPTH)).reason).toBe('nesting deeper than 64 levels');
    expect(errorOf(`${'-'.repeat(200)}1`).reason).toBe('nesting deeper than 64 levels');
    expect(errorOf(`2${'^2'.repeat(100)}`).reason).toBe('nesting deeper than 64 levels');
    expect(errorOf(`${'sqrt('.repeat(80)}1${')'.repeat(80)}`).reason).toBe(
      'nesting deeper than 64 levels',
    );
  });
});

// --- random expressions ----------------------------------------------------

/** A deterministic generator (mulberry32), so a failure reproduces. */
function randomSource(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

type Tree =
  | { kind: 'number'; value: number }
  | { kind: 'negate'; operand: Tree }
  | { kind: 'binary'; operator: '+' | '-' | '*' | '/' | '^'; left: Tree; right: Tree };

function randomTree(random: () => number, depth: number): Tree {
  if (depth === 0 || random() < 0.25) {
    return { kind: 'number', value: Math.floor(random() * 10) };
  }
  if (random() < 0.15) return { kind: 'negate', operand: randomTree(random, depth - 1) };
  const operators = ['+', '-', '*', '/', '^'] as const;
  const operator = operators[Math.floor(random() * operators.length)] ?? '+';
  return {
    kind: 'binary',
    operator,
    left: randomTree(random, depth - 1),
    // Small exponents keep most powers finite.
    right: randomTree(random, operator === '^' ? Math.min(depth - 1, 1) : depth - 1),
  };
}

/** The tree's value by plain JavaScript arithmetic; undefined where the calculator must refuse. */
function treeValue(tree: Tree): number | undefined {
  if (tree.kind === 'number') return tree.value;
  if (tree.kind === 'negate') {
    const operand = treeValue(tree.operand);
    return operand === undefined ? undefined : -operand;
  }
  const left = treeValue(tree.left);
  const right = treeValue(tree.right);
  if (left === undefined || right === undefined) return undefined;
  if (tree.operator === '/' && right === 0) return undefined;
  const value =
    tree.operator === '+'
      ? left + right
      : tree.operator === '-'
        ? left - right
        : tree.operator === '*'
          ? left * right
          : tree.operator === '/'
            ? left / right
            : left ** right;
  return Number.isFinite(value) ? value : undefined;
}

const PRECEDENCE = { '+': 1, '-': 1, '*': 2, '/': 2, negate: 3, '^': 4, number: 5 } as const;

function precedence(tree: Tree): number {
  if (tree.kind === 'binary') return PRECEDENCE[tree.operator];
  return PRECEDENCE[tree.kind];
}

/** The tree with only the parentheses the documented grammar needs. */
function print(tree: Tree): string {
  const wrap = (child: Tree, needed: boolean) => (needed ? `(${print(child)})` : print(child));
  if (tree.kind === 'number') return String(tree.value);
  if (tree.kind === 'negate') return `-${wrap(tree.operand, precedence(tree.operand) < 3)}`;
  const own = PRECEDENCE[tree.operator];
  if (tree.operator === '^') {
    // Base: an atom; exponent: anything from unary up.
    return `${wrap(tree.left, precedence(tree.left) < 5)}^${wrap(tree.right, precedence(tree.right) < 3)}`;
  }
  // Left-associative: a right operand of the same level keeps its parentheses.
  return `${wrap(tree.left, precedence(tree.left) < own)} ${tree.operator} ${wrap(tree.right, precedence(tree.right) <= own)}`;
}

describe('calculator on random expressions', () => {
  it('agrees with plain arithmetic on 2000 expressions printed with minimal parentheses', () => {
    const random = randomSource(20_240_531);
    let refused = 0;
    for (let i = 0; i < 2000; i++) {
      const tree = randomTree(random, 5);
      const expression = print(tree);
      const expected = treeValue(tree);
      if (expected === undefined) {
        refused++;
        expect(() => evaluateExpression(expression), expression).toThrow(ExpressionError);
        continue;
      }
      expect(evaluateExpression(expression), expression).toBe(expected === 0 ? 0 : expected);
    }
    // Both paths were exercised.
    expect(refused).toBeGreaterThan(10);
    expect(refused).toBeLessThan(1000);
  });

  it('answers random junk with an ExpressionError and never anything else', () => {
    const random = randomSource(7);
    const alphabet = '0123456789.+-*/%^(),eEpisqrtmaxlog \u00d7$';
    for (let i = 0; i < 3000; i++) {
      const length = Math.floor(random() * 40);
      let input = '';
      for (let j = 0; j < length; j++) input += alphabet[Math.floor(random() * alphabet.length)];
      try {
        const value = evaluateExpression(input);
        expect(Number.isFinite(value), input).toBe(true);
      } catch (error) {
        expect(error, input).toBeInstanceOf(ExpressionError);
        const { position } = error as ExpressionError;
        expect(position).toBeGreaterThanOrEqual(0);
        expect(position).toBeLessThanOrEqual(input.length);
      }
    }
  });
});

describe('calculator tool', () => {
  it('returns the formatted result', async () => {
    await expect(calculatorTool.execute({ expression: '(17.5 - 3) * 2' }, ctx)).resolves.toEqual({
      content: '29',
    });
  });

  it('returns an error result pointing at the bad character', async () => {
    const result = await calculatorTool.execute({ expression: '2 * (3 + )' }, ctx);
    expect(result).toEqual({
      content:
        'Cannot evaluate the expression at position 10: unexpected ")".\n  2 * (3 + )\n           ^',
      isError: true,
    });
  });

  it('limits the expression in its parameters too', () => {
    expect(calculatorTool.parameters.safeParse({ expression: '1'.repeat(501) }).success).toBe(
      false,
    );
    expect(calculatorTool.parameters.safeParse({ expression: '' }).success).toBe(false);
  });
});

describe('calculator round(x, digits) on large values', () => {
  // roundTo builds `${Math.round(...)}e${-digits}`: once x * 10^digits reaches
  // 1e21, String() of the rounded value is itself exponential ("1e+21"), the
  // text becomes "1e+21e-1", Number() of it is NaN, and the calculator
  // answers "result is not a real number" for a perfectly finite number.
  it.each([
    ['round(1e20, 1)', 1e20],
    ['round(123456789012, 10)', 123456789012],
    ['round(12345678901.5, 12)', 12345678901.5],
  ])('%s = %d', (expression, expected) => {
    expect(evaluateExpression(expression)).toBe(expected);
  });

  it('answers the model with the number, not an error', async () => {
    const result = await calculatorTool.execute({ expression: 'round(1e20, 2)' }, ctx);
    expect(result).toEqual({ content: formatNumber(1e20) });
  });
});

describe('calculator error message for a character outside the BMP', () => {
  it('names the whole character, not half of its surrogate pair', async () => {
    // input[at] is one UTF-16 unit: the message quotes a lone surrogate, which
    // becomes U+FFFD on its way to the model ("unexpected character "�"").
    const result = await calculatorTool.execute({ expression: '𝟐 + 1' }, ctx);
    expect(result.isError).toBe(true);
    expect(result.content.isWellFormed()).toBe(true);
    expect(result.content).toContain('unexpected character "𝟐"');
  });
});
