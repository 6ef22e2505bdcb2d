import { z } from 'zod';
import { hasNoNulInJson, NO_NUL_MESSAGE } from './schemas.js';

/** A test call's `arguments` (POST /v1/tools/:id/test, /v1/mcp-servers/:id/test). */
export const toolTestArguments = z
  .record(z.string(), z.unknown())
  .refine(hasNoNulInJson, NO_NUL_MESSAGE)
  .describe('The call’s arguments, as a model would give them');

/** What a test call answers (orchestrator/tool-test.ts). */
export const toolTestSchema = z
  .object({
    outcome: z
      .enum(['completed', 'failed', 'timeout', 'interrupted'])
      .describe(
        'completed; failed (an error answer, a timeout, a refused host: `content` says which)',
      ),
    isError: z.boolean(),
    content: z.string().describe('As the tool loop reads it, header secrets redacted'),
    elapsedMs: z.number().int(),
    callId: z.string().describe('The end of the call’s Idempotency-Key'),
  })
  .meta({ id: 'ToolTest' });
