import { z } from 'zod';

/**
 * The declared shape of a stage result, checked by the StageValidator
 * without a model call, so every rule here must be decidable from the text:
 *
 * - `format: 'text'`: prose; `fields` are labels (section names, "Total:")
 *   the text must mention, case-insensitively.
 * - `format: 'list'`: at least `minItems` (default 1) Markdown list items
 *   (`- `, `* `, `+ `, `• `, `1. `, `1) ` at the start of a line); `fields`
 *   as for text.
 * - `format: 'json'`: one JSON object, bare or in a ```json fence; `fields`
 *   are top-level keys it must have with a non-null value.
 *   `consistentWith` names earlier `json` stages: every top-level scalar key
 *   both objects have must hold the same value (numbers numerically, strings
 *   trimmed and case-insensitively), so a later stage cannot silently change
 *   a figure an earlier one established.
 */
export const OUTPUT_FORMATS = ['text', 'json', 'list'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/** Enough for any real shape; a longer list is a model rambling, not a contract. */
const MAX_FIELDS = 50;

export const expectedOutputSchema = z
  .object({
    format: z.enum(OUTPUT_FORMATS),
    fields: z.array(z.string().trim().min(1).max(100)).max(MAX_FIELDS).optional(),
    minItems: z.number().int().min(1).max(1000).optional(),
    // Trimmed as stage ids and dependsOn are (plan.ts), so the validator finds the stage named.
    consistentWith: z.array(z.string().trim()).max(MAX_FIELDS).optional(),
  })
  .superRefine((output, context) => {
    if (output.minItems !== undefined && output.format !== 'list') {
      context.addIssue({
        code: 'custom',
        path: ['minItems'],
        message: 'minItems applies to format "list" only',
      });
    }
    if (output.consistentWith !== undefined && output.format !== 'json') {
      context.addIssue({
        code: 'custom',
        path: ['consistentWith'],
        message: 'consistentWith applies to format "json" only (it compares JSON fields)',
      });
    }
  });

export type ExpectedOutput = z.infer<typeof expectedOutputSchema>;

/** The shape in words, for the stage prompt: the model is told what the validator will check. */
export function describeExpectedOutput(output: ExpectedOutput | undefined): string {
  if (!output) return 'Reply in plain prose or Markdown, whichever suits the result.';
  const fields = output.fields ?? [];
  switch (output.format) {
    case 'text':
      return fields.length > 0
        ? `Reply in prose or Markdown that covers, by name: ${fields.join(', ')}.`
        : 'Reply in prose or Markdown.';
    case 'list': {
      const items = output.minItems ?? 1;
      const count = items === 1 ? 'at least one item' : `at least ${items} items`;
      const named = fields.length > 0 ? `, mentioning by name: ${fields.join(', ')}` : '';
      return `Reply with a Markdown list (${count}, one per line starting with "- " or "1. ")${named}.`;
    }
    case 'json': {
      const keys =
        fields.length > 0
          ? ` with the top-level fields ${fields.map((field) => JSON.stringify(field)).join(', ')}`
          : '';
      const same =
        (output.consistentWith ?? []).length > 0
          ? ` Fields it shares with the results of ${output.consistentWith?.join(', ')} must keep their values.`
          : '';
      return `Reply with one JSON object${keys}, in a \`\`\`json block and nothing else.${same}`;
    }
  }
}
