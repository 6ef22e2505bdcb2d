import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../errors.js';
import type { Services } from '../../services.js';
import { migrationsAreCurrent } from '../../store/migrate.js';
import { within } from '../../within.js';
import { problemResponses } from '../problem.js';

/** Liveness and readiness, unauthenticated, for load balancers and orchestrators. */
export const healthRoutes: FastifyPluginAsyncZod<{ services: Services }> = async (
  app,
  { services },
) => {
  // Probes arrive every few seconds; their successful requests are not worth an info line each.
  const logLevel = quieter('warn', services.config.LOG_LEVEL);
  const databaseCheck = singleFlight(() =>
    migrationsAreCurrent(services.database.pool, services.migrations),
  );
  app.get(
    '/healthz',
    {
      logLevel,
      schema: {
        tags: ['health'],
        summary: 'Liveness: the process answers',
        response: { 200: z.object({ status: z.literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      logLevel,
      schema: {
        tags: ['health'],
        summary: 'Readiness: started, the database answers and its migrations are current',
        response: {
          200: z.object({ status: z.literal('ready'), migrations: z.number().int() }),
          ...problemResponses(503),
        },
      },
    },
    async () => {
      if (!services.startup.isComplete())
        throw notReady('starting', 'The service is still starting');
      let current: boolean | undefined;
      try {
        current = await within(databaseCheck(), READINESS_DEADLINE_MS);
      } catch (error) {
        throw notReady('database_unavailable', 'The database does not answer', error);
      }
      if (current === undefined) {
        throw notReady(
          'database_unavailable',
          `The database did not answer within ${READINESS_DEADLINE_MS / 1000} s`,
        );
      }
      if (!current) throw notReady('migrations_pending', 'The database migrations are not current');
      return { status: 'ready' as const, migrations: services.migrations.length };
    },
  );
};

/**
 * How long readiness waits for the database: one that stops answering
 * without closing its connections (its host froze, a partition) would
 * otherwise hold the probe until TCP gives up, many minutes later.
 */
const READINESS_DEADLINE_MS = 5000;

/**
 * The check in flight, shared by the probes that arrive while it runs: a
 * silent database holds one pool connection for them all, not one each.
 */
function singleFlight<T>(check: () => Promise<T>): () => Promise<T> {
  let inFlight: Promise<T> | undefined;
  return () => {
    inFlight ??= check().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };
}

function notReady(code: string, message: string, cause?: unknown): AppError {
  return new AppError({
    code,
    status: 503,
    userMessage: message,
    blame: 'configuration',
    cause,
    retryable: true,
  });
}

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
type Level = (typeof LEVELS)[number];

function quieter(a: Level, b: Level): Level {
  return LEVELS.indexOf(a) >= LEVELS.indexOf(b) ? a : b;
}
