import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { METRICS_CONTENT_TYPE } from '../../metrics/registry.js';
import type { WaymarkMetrics } from '../../metrics/waymark-metrics.js';
import { problemResponses } from '../problem.js';

/**
 * `GET /metrics`: this replica's metrics in the Prometheus text format.
 * Registered in a scope of its own with bearer authentication: an admin
 * key of the operator tenant, as the counts span every tenant.
 */
export const metricsRoutes: FastifyPluginAsyncZod<{
  metrics: Pick<WaymarkMetrics, 'render'>;
}> = async (app, { metrics }) => {
  app.get(
    '/metrics',
    {
      config: { scope: 'admin', operatorOnly: true },
      schema: {
        tags: ['health'],
        summary: 'This replica’s metrics, Prometheus text format (operator admins only)',
        response: {
          200: {
            description: 'The Prometheus text exposition format, version 0.0.4',
            content: { 'text/plain': { schema: z.string() } },
          },
          ...problemResponses(401, 403),
        },
      },
    },
    async (_request, reply) => {
      reply.header('cache-control', 'no-store');
      return reply.type(METRICS_CONTENT_TYPE).send(metrics.render());
    },
  );
};
