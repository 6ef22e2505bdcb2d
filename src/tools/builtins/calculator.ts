import { z } from 'zod';
import type { Tool } from '../types.js';
import {
  ExpressionError,
  evaluateExpression,
  formatNumber,
  MAX_EXPRESSION_LENGTH,
} from './arithmetic.js';

const parameters = z.object({
  expression: z
    .string()
    .min(1)
    .max(MAX_EXPRESSION_LENGTH)
    .describe('Arithmetic expression, e.g. "(17.5 - 3) * 2^10 / sqrt(2)"'),
});

export const calculatorTool: Tool<typeof parameters> = {
  name: 'calculator',
  description:
    'Evaluates an arithmetic expression exactly as written and returns the number. ' +
    'Operators: + - * / % ^ (power, right-associative), unary minus, parentheses; ' +
    'numbers like 3, 2.5, 1e-3. Functions: sqrt, abs, round(x, digits?), floor, ceil, ' +
    'min(a, b, ...), max(a, b, ...), log(x, base?) (base 10 by default), ln, exp, ' +
    'sin, cos, tan (radians). Constants: pi, e.',
  parameters,
  timeoutMs: 1000,
  async execute({ expression }) {
    try {
      return { content: formatNumber(evaluateExpression(expression)) };
    } catch (error) {
      if (!(error instanceof ExpressionError)) throw error;
      return { content: describeError(expression, error), isError: true };
    }
  },
};

/** The reason, and the expression with a caret under the offending character. */
function describeError(expression: string, error: ExpressionError): string {
  const shown = expression.replace(/\s/g, ' ');
  if (shown.length > 120) return `Cannot evaluate the expression ${error.message}.`;
  // One column per character: a character outside the BMP is two UTF-16 units of `position`.
  const column = [...shown.slice(0, error.position)].length;
  return `Cannot evaluate the expression ${error.message}.\n  ${shown}\n  ${' '.repeat(column)}^`;
}
