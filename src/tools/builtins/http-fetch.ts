import type { IncomingHttpHeaders } from 'node:http';
import { z } from 'zod';
import { decodeText, type GuardedResponse, guardedRequest } from '../guarded-request.js';
import { hostAllowed } from '../host-allowlist.js';
import { BlockedAddressError, type Resolver } from '../network-guard.js';
import { type Tool, type ToolContext, ToolFailure, type ToolResult } from '../types.js';

/**
 * `http_fetch`: GET or HEAD a URL on an allowlisted host. Every hop
 * (redirects are followed by hand) passes the same checks: http or https,
 * a host on the allowlist, every resolved address public unless the
 * operator allows private ones, the connection pinned to those addresses.
 */

export const MAX_REDIRECTS = 3;

const parameters = z.object({
  url: z.string().min(1).max(2048).describe('Absolute http:// or https:// URL.'),
  method: z
    .enum(['GET', 'HEAD'])
    .default('GET')
    .describe('HEAD returns the status and content type without the body.'),
});

export interface HttpFetchOptions {
  /** Host patterns (`HTTP_FETCH_ALLOWED_HOSTS`); see host-allowlist.ts. */
  allowedHosts: readonly string[];
  /** `HTTP_TOOLS_ALLOW_PRIVATE`. */
  allowPrivate: boolean;
  /** `HTTP_FETCH_MAX_BYTES`. */
  maxBytes: number;
  /** `HTTP_FETCH_TIMEOUT_MS`: the whole call, redirects and body included. */
  timeoutMs: number;
  /** DNS resolution; tests pass a fixed table. */
  resolver?: Resolver;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

export function createHttpFetchTool(options: HttpFetchOptions): Tool<typeof parameters> {
  return {
    name: 'http_fetch',
    description:
      'Fetches a web page or file over HTTP(S) with GET or HEAD and returns the status, content type ' +
      `and the text body (cut at ${options.maxBytes} bytes). Only these hosts can be fetched: ` +
      `${options.allowedHosts.join(', ')}. Redirects are followed up to ${MAX_REDIRECTS} times.`,
    parameters,
    // Longer than the tool's own timeout, so the loop sees its clearer message first.
    timeoutMs: options.timeoutMs + 1000,
    async execute(args, ctx) {
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(), options.timeoutMs);
      const signal = AbortSignal.any([ctx.signal, timeout.signal]);
      try {
        return await fetchFollowingRedirects(args, { ...options, signal });
      } catch (error) {
        return failureResult(error, { ctx, timedOut: timeout.signal.aborted, options });
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

interface FetchRun extends HttpFetchOptions {
  signal: AbortSignal;
}

async function fetchFollowingRedirects(
  args: z.infer<typeof parameters>,
  run: FetchRun,
): Promise<ToolResult> {
  let url = parseUrl(args.url);
  for (let redirects = 0; ; redirects++) {
    checkUrl(url, run.allowedHosts);
    const response = await guardedRequest(url, {
      method: args.method,
      headers: {
        'user-agent': 'Waymark-http_fetch/1',
        accept: '*/*',
        // The byte limit applies to what is read; a compressed body would hide its real size.
        'accept-encoding': 'identity',
      },
      signal: run.signal,
      maxBytes: run.maxBytes,
      allowPrivate: run.allowPrivate,
      resolver: run.resolver,
      wantBody: (status, headers) =>
        args.method === 'GET' && !(REDIRECT_STATUSES.has(status) && headers.location),
    });
    const location = response.headers.location;
    if (!REDIRECT_STATUSES.has(response.status) || !location) {
      return { content: formatResponse(response, url, redirects > 0) };
    }
    if (redirects === MAX_REDIRECTS) {
      throw new ToolFailure(
        `stopped after ${MAX_REDIRECTS} redirects (the next was to ${location})`,
      );
    }
    url = parseUrl(location, url);
  }
}

function parseUrl(text: string, base?: URL): URL {
  try {
    return new URL(text, base);
  } catch {
    throw new ToolFailure(`"${text}" is not a valid absolute URL`);
  }
}

function checkUrl(url: URL, allowedHosts: readonly string[]): void {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ToolFailure(`only http and https URLs can be fetched, not ${url.protocol}`);
  }
  if (url.username || url.password) {
    throw new ToolFailure('URLs with a user name or password cannot be fetched');
  }
  if (!hostAllowed(url.hostname, allowedHosts)) {
    throw new ToolFailure(
      `${url.hostname} is not an allowed host (allowed: ${allowedHosts.join(', ')})`,
    );
  }
}

function failureResult(
  error: unknown,
  situation: { ctx: ToolContext; timedOut: boolean; options: HttpFetchOptions },
): ToolResult {
  // A cancelled workflow is the loop's business, not the model's.
  if (situation.ctx.signal.aborted) throw situation.ctx.signal.reason ?? error;
  if (situation.timedOut) {
    return {
      content: `Fetch failed: no complete response within ${situation.options.timeoutMs} ms.`,
      isError: true,
    };
  }
  if (error instanceof ToolFailure)
    return { content: `Fetch refused: ${error.message}.`, isError: true };
  if (error instanceof BlockedAddressError) {
    return { content: `Fetch refused: ${error.userMessage}.`, isError: true };
  }
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return {
      content: `Fetch failed: ${code ? `${code} ` : ''}${error.message}`.trimEnd(),
      isError: true,
    };
  }
  throw error;
}

function formatResponse(response: GuardedResponse, url: URL, redirected: boolean): string {
  const contentType = header(response.headers, 'content-type');
  const lines = [`Status: ${response.status} ${response.statusText}`.trimEnd()];
  lines.push(`Content-Type: ${contentType ?? '(none)'}`);
  if (redirected) lines.push(`Final URL: ${url.href}`);
  const body = describeBody(response, contentType);
  return body === undefined ? lines.join('\n') : `${lines.join('\n')}\n\n${body}`;
}

function describeBody(
  response: GuardedResponse,
  contentType: string | undefined,
): string | undefined {
  if (response.body.length === 0) return undefined;
  const encoding = header(response.headers, 'content-encoding');
  if (encoding && encoding.toLowerCase() !== 'identity') {
    return `[The body is ${encoding}-compressed (${response.body.length} bytes read); not shown.]`;
  }
  if (!isText(contentType, response.body)) {
    return `[Binary content (${contentType ?? 'unknown type'}), ${response.body.length} bytes read; not shown.]`;
  }
  let text = decodeText(response.body, contentType);
  if (!response.truncated) return text;
  // The cut may split a multi-byte character; drop its remains.
  text = text.replace(/\uFFFD+$/, '');
  return `${text}\n[Truncated: the body is longer than ${response.body.length} bytes; the rest was not read.]`;
}

const TEXT_TYPES =
  /^(text\/|application\/(json|xml|javascript|ecmascript|x-www-form-urlencoded|x-ndjson|yaml|x-yaml|toml|csv|graphql|rss\+xml|atom\+xml)\b)|\+(json|xml)\b/i;

function isText(contentType: string | undefined, body: Buffer): boolean {
  if (contentType) return TEXT_TYPES.test(contentType.trim());
  // No declared type: text unless it has NUL bytes early on.
  return !body.subarray(0, 1024).includes(0);
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}
