/**
 * The one error base of Waymark. Every layer throws `AppError` (or lets an
 * unknown throw reach the HTTP boundary, where `toAppError` normalises it
 * once). The HTTP error handler turns an `AppError` into problem+json; a
 * cause never leaves the process, and neither does a 500's message.
 */

/** Who has to act for the error to go away. */
export type Blame = 'user' | 'configuration' | 'provider' | 'system';

export interface FieldProblem {
  /** Where the problem is, e.g. `body.scopes.0` or `query.limit`. */
  field: string;
  message: string;
}

export interface AppErrorOptions {
  /** Stable, machine-readable code clients may branch on. */
  code: string;
  /** HTTP status the error maps to at the boundary. */
  status: number;
  /** Safe to show to an end user (never a cause's text); a 500 shows a generic one instead. */
  userMessage: string;
  blame: Blame;
  retryable?: boolean;
  cause?: unknown;
  fields?: FieldProblem[];
  /** Extra response headers, e.g. `Allow` or `Retry-After`. */
  headers?: Record<string, string>;
  /** The resource's state that caused a conflict (a workflow's status and version), for the client to act on. */
  current?: Record<string, unknown>;
}

export class AppError extends Error {
  readonly code: string;
  readonly status: number;
  readonly userMessage: string;
  readonly blame: Blame;
  readonly retryable: boolean;
  readonly fields: FieldProblem[] | undefined;
  readonly headers: Record<string, string>;
  readonly current: Record<string, unknown> | undefined;

  constructor(options: AppErrorOptions) {
    super(options.userMessage, { cause: options.cause });
    this.name = 'AppError';
    this.code = options.code;
    this.status = options.status;
    this.userMessage = options.userMessage;
    this.blame = options.blame;
    this.retryable = options.retryable ?? false;
    this.fields = options.fields;
    this.headers = options.headers ?? {};
    this.current = options.current;
  }
}

export function badRequest(code: string, userMessage: string, fields?: FieldProblem[]): AppError {
  return new AppError({ code, status: 400, userMessage, blame: 'user', fields });
}

export function unauthorized(code: string, userMessage: string): AppError {
  return new AppError({
    code,
    status: 401,
    userMessage,
    blame: 'user',
    headers: { 'WWW-Authenticate': 'Bearer realm="waymark"' },
  });
}

export function forbidden(code: string, userMessage: string): AppError {
  return new AppError({ code, status: 403, userMessage, blame: 'user' });
}

/** A 429 whose `Retry-After` (whole seconds, at least 1) the message also names. */
export function tooManyRequests(
  code: string,
  retryAfterMs: number,
  message: (seconds: number) => string,
): AppError {
  const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
  return new AppError({
    code,
    status: 429,
    userMessage: message(seconds),
    blame: 'user',
    retryable: true,
    headers: { 'Retry-After': String(seconds) },
  });
}

/** Also the answer for another tenant's resources: their existence is not revealed. */
export function notFound(what: string): AppError {
  return new AppError({
    code: 'not_found',
    status: 404,
    userMessage: `${what} was not found`,
    blame: 'user',
  });
}

export function conflict(
  code: string,
  userMessage: string,
  current?: Record<string, unknown>,
): AppError {
  return new AppError({ code, status: 409, userMessage, blame: 'user', current });
}

/** Normalises anything thrown into an AppError; unknown throws become a 500 that keeps the cause. */
export function toAppError(error: unknown): AppError {
  if (error instanceof AppError) return error;
  return new AppError({
    code: 'internal_error',
    status: 500,
    userMessage: 'An internal error occurred',
    blame: 'system',
    cause: error,
  });
}
