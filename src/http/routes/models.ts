import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Catalogue } from '../../llm/catalogue.js';
import { allowedNames, selectModel } from '../../llm/model-selection.js';
import { principalOf } from '../auth.js';
import { problemResponses } from '../problem.js';

const modelSchema = z
  .object({
    name: z.string().describe('What requests name in `model`'),
    provider: z.string(),
    contextWindow: z.number().int(),
    maxOutputTokens: z.number().int(),
  })
  .meta({ id: 'Model' });

/** The models the caller's tenant may use. */
export const modelRoutes: FastifyPluginAsyncZod<{ catalogue: Catalogue }> = async (
  app,
  { catalogue },
) => {
  app.get(
    '/models',
    {
      schema: {
        tags: ['models'],
        summary: 'The models your tenant may use, and which one is used when a request names none',
        response: {
          200: z.object({ items: z.array(modelSchema), defaultModel: z.string().nullable() }),
          ...problemResponses(401, 429),
        },
      },
    },
    async (request) => {
      const { tenant } = principalOf(request);
      const allowed = new Set(allowedNames(catalogue, tenant));
      const items = catalogue.models
        .filter((model) => allowed.has(model.name))
        .map((model) => ({
          name: model.name,
          provider: model.provider,
          contextWindow: model.contextWindow,
          maxOutputTokens: model.maxOutputTokens,
        }));
      return { items, defaultModel: items.length > 0 ? selectModel({ catalogue, tenant }) : null };
    },
  );
};
