import { randomUUID } from 'node:crypto';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
} from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { AppError } from '../errors.js';
import { redactUrl } from '../logger.js';
import type { Services } from '../services.js';
import { createStreamTokens } from '../tenancy/stream-tokens.js';
import { builtinTools } from '../tools/registry.js';
import { bearerAuth } from './auth.js';
import { createAuthFailures } from './auth-failures.js';
import { corsHeadersFor, registerCors } from './cors.js';
import { answerClientError, answerFrameworkError, installErrorHandling } from './error-handler.js';
import { parseJsonBodies } from './json-body.js';
import { registerOpenApi } from './openapi.js';
import { sendProblem } from './problem.js';
import { rateLimitHook } from './rate-limit.js';
import { apiKeyRoutes } from './routes/api-keys.js';
import { healthRoutes } from './routes/health.js';
import { mcpServerRoutes } from './routes/mcp-servers.js';
import { metricsRoutes } from './routes/metrics.js';
import { modelRoutes } from './routes/models.js';
import { sessionRoutes } from './routes/sessions.js';
import { tenantRoutes } from './routes/tenants.js';
import { toolRoutes } from './routes/tools.js';
import { usageRoutes } from './routes/usage.js';
import { workflowActionRoutes } from './routes/workflow-actions.js';
import { workflowEventRoutes } from './routes/workflow-events.js';
import { workflowPipelineRoutes } from './routes/workflow-pipeline.js';
import { workflowTraceRoutes } from './routes/workflow-trace.js';
import { workflowRoutes } from './routes/workflows.js';
import { eventStreams } from './sse.js';

const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

const SHUTTING_DOWN = new AppError({
  code: 'shutting_down',
  status: 503,
  userMessage: 'This replica is shutting down; retry, another one will answer',
  blame: 'system',
  retryable: true,
  headers: { 'Retry-After': '1' },
});

/** Node's own limit on receiving a request's headers, kept when the request timeout is longer. */
const NODE_HEADERS_TIMEOUT_MS = 60_000;

/**
 * Builds the whole HTTP app over the given services. Never listens: main.ts
 * does, and tests use the very same app with `inject` or a socket.
 */
export async function buildApp(services: Services): Promise<FastifyInstance> {
  const { config } = services;
  // Typed as Fastify's logger so the instance keeps Fastify's default generics.
  const loggerInstance: FastifyBaseLogger = services.log.child(
    {},
    { serializers: { req: requestLogFields } },
  );
  const streamTokens = createStreamTokens({
    db: services.database.db,
    ttlSeconds: config.STREAM_TOKEN_TTL_SECONDS,
  });
  const app = Fastify({
    loggerInstance,
    bodyLimit: config.BODY_LIMIT_BYTES,
    trustProxy: config.TRUST_PROXY,
    // A caller's X-Request-Id is kept when it is a sane token, so one id
    // follows a request across services; otherwise we make one.
    requestIdHeader: false,
    genReqId: (request) => {
      const given = request.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID_PATTERN.test(given) ? given : randomUUID();
    },
    frameworkErrors: answerFrameworkError(corsHeadersFor(config.CORS_ALLOWED_ORIGINS)),
    clientErrorHandler: answerClientError(loggerInstance),
    // Our own 503 while closing (below), a problem+json like every other error.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // A client sending its request slowly (slowloris, a stalled upload)
    // would otherwise hold its connection for good: Fastify's default is
    // no limit. Node checks the connections every connectionsCheckingInterval,
    // so a request is refused between one and 1.25 timeouts after it began.
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    http: {
      headersTimeout: Math.min(config.REQUEST_TIMEOUT_MS, NODE_HEADERS_TIMEOUT_MS),
      connectionsCheckingInterval: Math.ceil(config.REQUEST_TIMEOUT_MS / 4),
    },
    routerOptions: { ignoreTrailingSlash: false },
  });
  // JSON only: without this, Fastify would parse text/plain bodies instead of answering 415.
  app.removeContentTypeParser('text/plain');
  parseJsonBodies(app);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app);
  // Set when the app starts closing (SIGTERM): a request that arrives on a
  // connection still open is sent elsewhere by its load balancer, before
  // any work is done for it (Fastify also asks the client to close it).
  // Before every route scope, so a preflight is answered ahead of /v1's
  // authentication, and before the closing hook, so its 503 is marked too.
  await registerCors(app, config.CORS_ALLOWED_ORIGINS);
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    if (closing) return sendProblem(reply, request, SHUTTING_DOWN);
  });
  // A request answered before its body has all arrived (401 from auth,
  // which runs before the body is read; 415; a route that reads no body):
  // on a keep-alive connection Node would go on reading the rest, and a
  // client still sending it slowly, or never finishing, would get a 408
  // REQUEST_TIMEOUT_MS later, a second answer to a request already
  // answered. So its connection is closed after the answer, as Fastify
  // does for its own body parser's refusals (413); one whose body has
  // arrived whole keeps its connection.
  app.addHook('onSend', (request, reply, payload, done) => {
    if (request.raw.complete) return done(null, payload);
    // An answer made within the tick its request arrived in (a cached key,
    // a 415) can come before Node's parser has marked the request complete,
    // though the rest of the body was in the very bytes it is parsing.
    setImmediate(() => {
      if (!request.raw.complete) reply.header('connection', 'close');
      done(null, payload);
    });
  });
  // A callback hook: no promise per request.
  app.addHook('onResponse', (request, reply, done) => {
    services.metrics.observeRequest({
      method: request.method,
      // The pattern (`/v1/workflows/:id`), never the path: one series per route, not per id.
      // Undefined when no route matched: every unknown path shares one series.
      route: request.routeOptions.url,
      status: reply.statusCode,
      seconds: reply.elapsedTime / 1000,
    });
    done();
  });

  await registerOpenApi(app);
  await app.register(eventStreams, {
    hub: services.hub,
    db: services.database.db,
    workflows: services.workflows,
    config,
    metrics: services.metrics,
  });
  await app.register(healthRoutes, { services });
  const auth = {
    tenancy: services.tenancy,
    streamTokens,
    failures: createAuthFailures({
      limit: config.AUTH_FAILURE_LIMIT,
      windowMs: config.AUTH_FAILURE_WINDOW_MS,
    }),
    metrics: services.metrics,
  };
  await app.register(async (scope) => {
    await scope.register(bearerAuth, auth);
    await scope.register(metricsRoutes, { metrics: services.metrics });
  });
  await app.register(
    async (v1) => {
      await v1.register(bearerAuth, auth);
      v1.addHook(
        'onRequest',
        rateLimitHook({
          counts: services.rateLimitCounts,
          defaultMax: config.RATE_LIMIT_MAX,
          windowMs: config.RATE_LIMIT_WINDOW_MS,
        }),
      );
      await v1.register(tenantRoutes, {
        tenancy: services.tenancy,
        catalogue: services.llm.catalogue,
        workflows: services.workflows,
      });
      await v1.register(modelRoutes, { catalogue: services.llm.catalogue });
      await v1.register(apiKeyRoutes, { tenancy: services.tenancy });
      await v1.register(workflowRoutes, { workflows: services.workflows });
      await v1.register(workflowActionRoutes, {
        workflows: services.workflows,
        reviews: services.reviews,
      });
      await v1.register(workflowPipelineRoutes, { reviews: services.reviews });
      await v1.register(workflowTraceRoutes, {
        db: services.database.db,
        workflows: services.workflows,
      });
      await v1.register(workflowEventRoutes, { workflows: services.workflows, streamTokens });
      await v1.register(toolRoutes, {
        httpTools: services.httpTools,
        builtins: builtinTools(config),
      });
      await v1.register(mcpServerRoutes, { mcpServers: services.mcpServers });
      await v1.register(sessionRoutes, { sessions: services.sessions });
      await v1.register(usageRoutes, {
        usageReports: services.usageReports,
        tenancy: services.tenancy,
      });
    },
    { prefix: '/v1' },
  );
  return app;
}

/** Fastify's request fields for the log, with secrets in the query string (stream tokens) redacted. */
function requestLogFields(request: FastifyRequest) {
  return {
    method: request.method,
    url: redactUrl(request.url),
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  };
}
