import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type {
  FastifyBaseLogger,
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
} from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { AppError, type FieldProblem, toAppError } from '../errors.js';
import { isDatabaseUnavailable, isStatementGivenUp } from '../store/database.js';
import type { CorsHeaders } from './cors.js';
import { PROBLEM_CONTENT_TYPE, sendProblem, toProblem } from './problem.js';

/**
 * Maps everything thrown in a request to problem+json, once, for the whole
 * app: our AppErrors as they are, Fastify's own client errors to stable
 * codes, validation errors with the failing fields, a database that
 * cannot be reached to a 503 with Retry-After, and anything unknown to a
 * 500 that is logged with its cause and shown without details.
 */
export function installErrorHandling(app: FastifyInstance): void {
  const routes = routeTable(app);

  app.setErrorHandler(answerError);

  app.setNotFoundHandler((request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = routes.allowedMethods(path);
    if (allowed.length > 0) {
      return sendProblem(
        reply,
        request,
        new AppError({
          code: 'method_not_allowed',
          status: 405,
          userMessage: `${request.method} is not allowed on ${path}; allowed: ${allowed.join(', ')}`,
          blame: 'user',
          headers: { Allow: allowed.join(', ') },
        }),
      );
    }
    return sendProblem(
      reply,
      request,
      new AppError({
        code: 'route_not_found',
        status: 404,
        userMessage: `No route ${request.method} ${path}`,
        blame: 'user',
      }),
    );
  });
}

function answerError(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const appError = fromFastifyError(error);
  if (appError.status >= 500) {
    request.log.error({ err: error }, 'request failed');
  } else {
    request.log.info({ code: appError.code, status: appError.status }, appError.userMessage);
  }
  return sendProblem(reply, request, appError);
}

/**
 * Fastify's `frameworkErrors`: what its router refuses before any hook
 * runs (a path that is not valid percent-encoding, a path parameter longer
 * than its limit), answered as every other error, with the CORS headers
 * the hooks would have added (`corsHeaders`).
 */
export function answerFrameworkError(corsHeaders: (origin: string | undefined) => CorsHeaders) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    reply.header('x-request-id', request.id);
    reply.headers(corsHeaders(request.headers.origin));
    return answerError(error, request, reply);
  };
}

/** Node's HTTP parser errors (the request never became a Fastify request), by their code. */
const HTTP_PARSER_ERRORS: Record<string, { status: number; code: string; message: string }> = {
  HPE_INVALID_CONTENT_LENGTH: {
    status: 400,
    code: 'invalid_content_length',
    message: 'The Content-Length header is not a length',
  },
  HPE_UNEXPECTED_CONTENT_LENGTH: {
    status: 400,
    code: 'invalid_content_length',
    message: 'Content-Length and Transfer-Encoding: chunked together',
  },
  HPE_HEADER_OVERFLOW: {
    status: 431,
    code: 'headers_too_large',
    message: 'The request line and headers are larger than the server accepts',
  },
  ERR_HTTP_REQUEST_TIMEOUT: {
    status: 408,
    code: 'request_timeout',
    message: 'The request did not arrive in time',
  },
};

/**
 * Fastify's `clientErrorHandler`: a request Node's HTTP parser refused
 * (a bad Content-Length, headers over the size limit, not HTTP at all) is
 * answered with a problem+json and a request id, then the connection is
 * closed, as Node does, since the rest of its bytes cannot be trusted.
 */
export function answerClientError(log: FastifyBaseLogger) {
  return (error: Error & { code?: string }, socket: Duplex): void => {
    // A reset connection, or one already gone: nobody to answer.
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const known = error.code ? HTTP_PARSER_ERRORS[error.code] : undefined;
    const appError = new AppError({
      code: known?.code ?? 'malformed_request',
      status: known?.status ?? 400,
      userMessage: known?.message ?? 'The request is not valid HTTP',
      blame: 'user',
      cause: error,
    });
    const requestId = randomUUID();
    log.info(
      { code: appError.code, status: appError.status, parserError: error.code, requestId },
      appError.userMessage,
    );
    if (socket.writable && !responseUnderway(socket)) {
      const body = JSON.stringify(toProblem(appError, { url: '/', id: requestId }));
      socket.write(
        `HTTP/1.1 ${appError.status} ${STATUS_CODES[appError.status]}\r\n` +
          `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
          `X-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy(error);
  };
}

/**
 * Whether a response is going out on the connection already: an event
 * stream, with a malformed request pipelined behind it. An answer written
 * now would land inside that response's body, so the connection is only
 * closed, as Node's own handler does. Node keeps the response it writes on
 * the socket as `_httpMessage`, which no public API exposes.
 */
function responseUnderway(socket: Duplex): boolean {
  const current = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } | null })
    ._httpMessage;
  return current?.headersSent === true;
}

/**
 * A second router holding every registered route, to tell "no such path"
 * (404) from "no such method on this path" (405), which Fastify's router
 * does not distinguish.
 */
function routeTable(app: FastifyInstance) {
  const router = FindMyWay({ ignoreTrailingSlash: false });
  const noop = () => undefined;
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (!router.hasRoute(method as HTTPMethod, route.url))
        router.on(method as HTTPMethod, route.url, noop);
    }
  });
  // Not OPTIONS: with CORS on, every path has one (the preflight's), which
  // would turn each unknown path's 404 into a 405.
  const candidates: HTTPMethod[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];
  return {
    allowedMethods(path: string): HTTPMethod[] {
      return candidates.filter((method) => router.find(method, path) !== null);
    },
  };
}

const FASTIFY_CLIENT_ERRORS: Record<string, { status: number; code: string; message?: string }> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    status: 415,
    code: 'unsupported_media_type',
    message: 'Send the body as application/json',
  },
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, code: 'payload_too_large' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, code: 'invalid_content_length' },
  FST_ERR_BAD_URL: {
    status: 400,
    code: 'invalid_url',
    message: 'The path is not valid percent-encoding',
  },
  FST_ERR_MAX_PARAM_LENGTH: {
    status: 414,
    code: 'path_parameter_too_long',
    message: 'A path parameter is over 100 characters long (ids are UUIDs)',
  },
};

/**
 * The parts of a request Fastify validates, as a field's prefix (`query`,
 * as the codes raised by handlers name it too) and a sentence.
 */
const BODY_PART = { field: 'body', message: 'The request body is invalid' };
const VALIDATED_PARTS: Record<string, { field: string; message: string }> = {
  body: BODY_PART,
  querystring: { field: 'query', message: 'The query string is invalid' },
  params: { field: 'params', message: 'The path parameters are invalid' },
  headers: { field: 'headers', message: 'The request headers are invalid' },
};

function fromFastifyError(error: FastifyError): AppError {
  if (error instanceof AppError) return error;
  if (hasZodFastifySchemaValidationErrors(error)) {
    const part = VALIDATED_PARTS[error.validationContext ?? 'body'] ?? BODY_PART;
    const fields: FieldProblem[] = error.validation.map((issue) => ({
      field: [part.field, ...issue.instancePath.split('/').filter(Boolean)].join('.'),
      message: issue.message ?? 'is invalid',
    }));
    return new AppError({
      code: 'validation_failed',
      status: 400,
      userMessage: part.message,
      blame: 'user',
      fields,
    });
  }
  const known = error.code ? FASTIFY_CLIENT_ERRORS[error.code] : undefined;
  if (known) {
    return new AppError({
      code: known.code,
      status: known.status,
      userMessage: known.message ?? error.message,
      blame: 'user',
      cause: error,
    });
  }
  const status = error.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return new AppError({
      code: 'bad_request',
      status,
      userMessage: error.message,
      blame: 'user',
      cause: error,
    });
  }
  if (isDatabaseUnavailable(error)) {
    return new AppError({
      code: 'database_unavailable',
      status: 503,
      userMessage: 'The database is unavailable',
      blame: 'system',
      retryable: true,
      headers: { 'Retry-After': '1' },
      cause: error,
    });
  }
  if (isStatementGivenUp(error)) {
    // Its statement rolled back for a passing reason (database.ts STATEMENT_GAVE_UP: a lock wait, a timeout, a deadlock).
    return new AppError({
      code: 'database_busy',
      status: 503,
      userMessage:
        'The database gave up on the request for now (a lock wait or a deadlock); retry it',
      blame: 'system',
      retryable: true,
      headers: { 'Retry-After': '1' },
      cause: error,
    });
  }
  return toAppError(error);
}
