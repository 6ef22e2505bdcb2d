/**
 * The calculator's arithmetic: a tokenizer and a recursive-descent parser
 * that evaluates as it parses. No eval, no Function: the input can only
 * ever be numbers, the operators below, parentheses, and the named
 * functions and constants of the tables.
 *
 *   expression := term (('+' | '-') term)*
 *   term       := unary (('*' | '/' | '%') unary)*
 *   unary      := ('-' | '+') unary | power
 *   power      := primary ('^' unary)?          right-associative: 2^3^2 = 2^9
 *   primary    := number | constant | function '(' arguments ')' | '(' expression ')'
 *
 * Unary minus binds looser than `^`, as in mathematics: -2^2 = -4, and
 * 2^-1 = 0.5.
 */

export const MAX_EXPRESSION_LENGTH = 500;
/** Deep enough for any honest formula; stops inputs built to exhaust the stack. */
export const MAX_NESTING_DEPTH = 64;

/** A bad expression, with the 0-based index of the offending character. */
export class ExpressionError extends Error {
  override name = 'ExpressionError';
  constructor(
    readonly reason: string,
    readonly position: number,
  ) {
    super(`at position ${position + 1}: ${reason}`);
  }
}

type Token =
  | { kind: 'number'; value: number; text: string; position: number }
  | { kind: 'name'; name: string; position: number }
  | { kind: 'symbol'; symbol: string; position: number }
  | { kind: 'end'; position: number };

interface FunctionSpec {
  arity: [min: number, max: number];
  apply(args: number[], fail: (reason: string) => never): number;
}

const unary = (fn: (x: number) => number): FunctionSpec => ({
  arity: [1, 1],
  apply: ([x = 0]) => fn(x),
});

const FUNCTIONS: Record<string, FunctionSpec> = {
  sqrt: {
    arity: [1, 1],
    apply: ([x = 0], fail) => (x < 0 ? fail('square root of a negative number') : Math.sqrt(x)),
  },
  abs: unary(Math.abs),
  round: { arity: [1, 2], apply: ([x = 0, digits = 0], fail) => roundTo(x, digits, fail) },
  floor: unary(Math.floor),
  ceil: unary(Math.ceil),
  min: { arity: [1, Number.POSITIVE_INFINITY], apply: (args) => Math.min(...args) },
  max: { arity: [1, Number.POSITIVE_INFINITY], apply: (args) => Math.max(...args) },
  log: {
    arity: [1, 2],
    apply: ([x = 0, base], fail) => {
      if (x <= 0) return fail('logarithm of a number that is not positive');
      if (base === undefined) return Math.log10(x);
      if (base <= 0 || base === 1) return fail('logarithm base must be positive and not 1');
      return Math.log(x) / Math.log(base);
    },
  },
  ln: {
    arity: [1, 1],
    apply: ([x = 0], fail) =>
      x <= 0 ? fail('logarithm of a number that is not positive') : Math.log(x),
  },
  exp: unary(Math.exp),
  sin: unary(Math.sin),
  cos: unary(Math.cos),
  tan: unary(Math.tan),
};

const CONSTANTS: Record<string, number> = { pi: Math.PI, e: Math.E };

/** Round half away from zero to `digits` decimals, on the number's decimal spelling (1.005 -> 1.01). */
function roundTo(x: number, digits: number, fail: (reason: string) => never): number {
  if (!Number.isInteger(digits) || digits < -15 || digits > 15) {
    return fail('round takes a whole number of digits from -15 to 15');
  }
  const sign = x < 0 ? -1 : 1;
  const magnitude = Math.abs(x);
  const text = String(magnitude);
  if (text.includes('e')) {
    const factor = 10 ** digits;
    return (sign * Math.round(magnitude * factor)) / factor;
  }
  const scaled = Math.round(Number(`${text}e${digits}`));
  // From 1e21 on, String() spells a number in exponent form ("1e+21e-1" is
  // NaN); and a double that large is far coarser than 10^-digits already.
  if (Math.abs(scaled) >= 1e21) return x;
  return sign * Number(`${scaled}e${-digits}`);
}

const SYMBOLS: Record<string, string> = {
  '+': '+',
  '-': '-',
  '\u2212': '-', // minus sign
  '*': '*',
  '\u00d7': '*', // multiplication sign
  '/': '/',
  '\u00f7': '/', // division sign
  '%': '%',
  '^': '^',
  '(': '(',
  ')': ')',
  ',': ',',
};

const NUMBER = /(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/y;
const NAME = /[A-Za-z_][A-Za-z0-9_]*/y;
const SPACE = /\s+/y;

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  let at = 0;
  const match = (pattern: RegExp): string | undefined => {
    pattern.lastIndex = at;
    return pattern.exec(input)?.[0];
  };
  while (at < input.length) {
    const space = match(SPACE);
    if (space) {
      at += space.length;
      continue;
    }
    const number = match(NUMBER);
    if (number) {
      const value = Number(number);
      if (!Number.isFinite(value)) throw new ExpressionError('number too large', at);
      tokens.push({ kind: 'number', value, text: number, position: at });
      at += number.length;
      continue;
    }
    const name = match(NAME);
    if (name) {
      tokens.push({ kind: 'name', name: name.toLowerCase(), position: at });
      at += name.length;
      continue;
    }
    if (input.startsWith('**', at)) {
      tokens.push({ kind: 'symbol', symbol: '^', position: at });
      at += 2;
      continue;
    }
    // A whole character: one outside the BMP is two UTF-16 units.
    const char = String.fromCodePoint(input.codePointAt(at) ?? 0);
    const symbol = SYMBOLS[char];
    if (!symbol) throw new ExpressionError(`unexpected character "${char}"`, at);
    tokens.push({ kind: 'symbol', symbol, position: at });
    at += 1;
  }
  tokens.push({ kind: 'end', position: input.length });
  return tokens;
}

function describe(token: Token): string {
  switch (token.kind) {
    case 'number':
      return `number ${token.text}`;
    case 'name':
      return `"${token.name}"`;
    case 'symbol':
      return `"${token.symbol}"`;
    case 'end':
      return 'end of expression';
  }
}

/** Per-evaluation parser state; one instance per call. */
class Parser {
  private index = 0;
  private depth = 0;

  constructor(private readonly tokens: Token[]) {}

  parse(): number {
    const value = this.expression();
    const next = this.peek();
    if (next.kind !== 'end') {
      const hint =
        next.kind === 'symbol' && next.symbol === ')'
          ? ' (no matching "(")'
          : next.kind === 'symbol' && next.symbol !== '('
            ? ''
            : ' (missing operator? write * to multiply)';
      throw new ExpressionError(`unexpected ${describe(next)}${hint}`, next.position);
    }
    return value;
  }

  private expression(): number {
    let value = this.term();
    for (;;) {
      const operator = this.takeSymbol('+', '-');
      if (!operator) return value;
      const right = this.term();
      value = finite(operator.symbol === '+' ? value + right : value - right, operator.position);
    }
  }

  private term(): number {
    let value = this.unary();
    for (;;) {
      const operator = this.takeSymbol('*', '/', '%');
      if (!operator) return value;
      const right = this.unary();
      if (operator.symbol === '*') {
        value = finite(value * right, operator.position);
        continue;
      }
      if (right === 0) {
        throw new ExpressionError(
          operator.symbol === '/' ? 'division by zero' : 'remainder of a division by zero',
          operator.position,
        );
      }
      value = finite(operator.symbol === '/' ? value / right : value % right, operator.position);
    }
  }

  private unary(): number {
    const start = this.peek();
    if (++this.depth > MAX_NESTING_DEPTH) {
      throw new ExpressionError(`nesting deeper than ${MAX_NESTING_DEPTH} levels`, start.position);
    }
    try {
      const sign = this.takeSymbol('-', '+');
      if (sign) {
        const operand = this.unary();
        return sign.symbol === '-' ? -operand : operand;
      }
      return this.power();
    } finally {
      this.depth--;
    }
  }

  private power(): number {
    const base = this.primary();
    const operator = this.takeSymbol('^');
    if (!operator) return base;
    const exponent = this.unary();
    return finite(base ** exponent, operator.position);
  }

  private primary(): number {
    const token = this.next();
    if (token.kind === 'number') return token.value;
    if (token.kind === 'symbol' && token.symbol === '(') {
      const value = this.expression();
      this.expect(')', token.position);
      return value;
    }
    if (token.kind === 'name') return this.named(token.name, token.position);
    throw new ExpressionError(
      token.kind === 'end' ? 'expression ends too early' : `unexpected ${describe(token)}`,
      token.position,
    );
  }

  private named(name: string, position: number): number {
    const open = this.takeSymbol('(');
    const constant = CONSTANTS[name];
    if (constant !== undefined) {
      if (open) throw new ExpressionError(`${name} is a constant, not a function`, position);
      return constant;
    }
    const spec = FUNCTIONS[name];
    if (!spec) {
      throw new ExpressionError(
        `unknown name "${name}" (functions: ${Object.keys(FUNCTIONS).join(', ')}; constants: ${Object.keys(CONSTANTS).join(', ')})`,
        position,
      );
    }
    if (!open) throw new ExpressionError(`${name} needs its arguments in parentheses`, position);
    const args = this.takeSymbol(')') ? [] : this.arguments(open.position);
    const [min, max] = spec.arity;
    if (args.length < min || args.length > max) {
      const expected =
        min === max
          ? `${min} argument${min === 1 ? '' : 's'}`
          : max === Number.POSITIVE_INFINITY
            ? `at least ${min} argument${min === 1 ? '' : 's'}`
            : `${min} or ${max} arguments`;
      throw new ExpressionError(`${name} takes ${expected}, got ${args.length}`, position);
    }
    const fail = (reason: string): never => {
      throw new ExpressionError(reason, position);
    };
    return finite(spec.apply(args, fail), position);
  }

  /** Comma-separated expressions up to the closing parenthesis (already past the opening one). */
  private arguments(openPosition: number): number[] {
    const args = [this.expression()];
    while (this.takeSymbol(',')) args.push(this.expression());
    this.expect(')', openPosition);
    return args;
  }

  private expect(symbol: string, openPosition: number): void {
    if (this.takeSymbol(symbol)) return;
    const next = this.peek();
    const reason =
      next.kind === 'end'
        ? `missing "${symbol}" for the "(" opened at position ${openPosition + 1}`
        : `expected "${symbol}" but found ${describe(next)}`;
    throw new ExpressionError(reason, next.position);
  }

  private takeSymbol(...symbols: string[]): Extract<Token, { kind: 'symbol' }> | undefined {
    const token = this.peek();
    if (token.kind !== 'symbol' || !symbols.includes(token.symbol)) return undefined;
    this.index++;
    return token;
  }

  private peek(): Token {
    // The tokenizer always ends with an `end` token, and parsing stops there.
    return this.tokens[this.index] ?? (this.tokens.at(-1) as Token);
  }

  private next(): Token {
    const token = this.peek();
    if (token.kind !== 'end') this.index++;
    return token;
  }
}

function finite(value: number, position: number): number {
  if (Number.isNaN(value)) throw new ExpressionError('result is not a real number', position);
  if (!Number.isFinite(value)) throw new ExpressionError('result is too large', position);
  return value;
}

/** Evaluates an arithmetic expression; throws `ExpressionError` for bad input. */
export function evaluateExpression(input: string): number {
  if (input.length > MAX_EXPRESSION_LENGTH) {
    throw new ExpressionError(
      `expression longer than ${MAX_EXPRESSION_LENGTH} characters`,
      MAX_EXPRESSION_LENGTH,
    );
  }
  if (input.trim() === '') throw new ExpressionError('empty expression', 0);
  const value = new Parser(tokenize(input)).parse();
  // -0 is an artefact of the arithmetic, never what a user means.
  return value === 0 ? 0 : value;
}

/**
 * A result for people and models: integers as such, others to 15
 * significant digits, which hides binary noise (0.1 + 0.2 -> 0.3).
 */
export function formatNumber(value: number): string {
  if (Number.isInteger(value) && Math.abs(value) < 1e21) return String(value);
  return String(Number(value.toPrecision(15)));
}
