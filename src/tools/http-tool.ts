import { redactSecrets } from '../redaction.js';
import type { HttpToolRow } from '../store/schema.js';
import { decodeText, type GuardedResponse, guardedRequest } from './guarded-request.js';
import { headerSecrets } from './header-secrets.js';
import { hostAllowed } from './host-allowlist.js';
import { parametersFromJsonSchema } from './json-schema-parameters.js';
import { BlockedAddressError, type Resolver } from './network-guard.js';
import { type Tool, type ToolContext, ToolFailure, type ToolResult } from './types.js';

/**
 * A tenant's HTTP tool as a `Tool` of the tool loop: a call POSTs the
 * arguments as JSON to the tool's URL with its stored headers and an
 * `Idempotency-Key` of workflow, step and call (a step cut off midway runs
 * again on another replica, and the tool server can tell the retry).
 * Every failure (refused host, timeout, unreachable, non-2xx) becomes an
 * error result for the model, never a throw. The tool's header values are
 * redacted from what the server answers (header-secrets.ts).
 */

/** Larger answers are cut here, with a note: the model could not use more anyway. */
export const HTTP_TOOL_MAX_RESPONSE_BYTES = 1024 * 1024;
/** Characters of a non-2xx body quoted in the error result. */
const ERROR_EXCERPT_CHARS = 300;

export interface HttpToolPolicy {
  /** `HTTP_TOOLS_ALLOWED_HOSTS`; empty: every host. */
  allowedHosts: readonly string[];
  /** `HTTP_TOOLS_ALLOW_PRIVATE`. */
  allowPrivate: boolean;
  /** DNS resolution; the system resolver unless a test injects one. */
  resolver?: Resolver;
}

export function toHttpTool(row: HttpToolRow, policy: HttpToolPolicy): Tool {
  const secrets = headerSecrets(row.headers);
  return {
    name: row.name,
    description: row.description,
    parameters: parametersFromJsonSchema(row.parameters),
    sequential: row.sequential,
    requiresApproval: row.requires_approval,
    // A second more than the call's own timeout, so the loop gets this tool's clearer message first.
    timeoutMs: row.timeout_ms + 1000,
    execute: (args, ctx) => callHttpTool({ row, policy, secrets, args, ctx }),
  };
}

/** `HTTP_TOOLS_ALLOWED_HOSTS` semantics: an empty list allows every host (the address check still applies). */
export function isHostAllowed(hostname: string, policy: HttpToolPolicy): boolean {
  return policy.allowedHosts.length === 0 || hostAllowed(hostname, policy.allowedHosts);
}

/** The `Idempotency-Key` of one tool call; stable when the same step runs again. */
export function idempotencyKey(ctx: ToolContext): string {
  return `${ctx.workflowId}:${ctx.step}:${ctx.callId}`;
}

async function callHttpTool(call: {
  row: HttpToolRow;
  policy: HttpToolPolicy;
  /** `headerSecrets` of the row's headers. */
  secrets: readonly string[];
  args: unknown;
  ctx: ToolContext;
}): Promise<ToolResult> {
  const { row, policy, ctx } = call;
  const url = new URL(row.url);
  // Checked again at call time: the allowlist may have shrunk since registration.
  if (!isHostAllowed(url.hostname, policy)) {
    return failed(`refused: ${url.hostname} is not among the hosts HTTP tools may call`);
  }
  const timeout = new AbortController();
  const timer = setTimeout(
    () => timeout.abort(new Error(`timed out after ${row.timeout_ms} ms`)),
    row.timeout_ms,
  );
  const signal = AbortSignal.any([ctx.signal, timeout.signal]);
  try {
    const body = JSON.stringify(call.args ?? {});
    const answer = await guardedRequest(url, {
      method: 'POST',
      headers: {
        accept: 'application/json, text/*;q=0.9',
        ...row.headers,
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        'idempotency-key': idempotencyKey(ctx),
      },
      body,
      signal,
      maxBytes: HTTP_TOOL_MAX_RESPONSE_BYTES,
      allowPrivate: policy.allowPrivate,
      resolver: policy.resolver,
    });
    return toResult(answer, call.secrets);
  } catch (error) {
    if (timeout.signal.aborted) {
      return failed(`the tool did not answer within ${row.timeout_ms} ms`);
    }
    if (ctx.signal.aborted) return failed('the call was cancelled');
    if (error instanceof BlockedAddressError) return failed(`refused: ${error.userMessage}`);
    if (error instanceof ToolFailure) return failed(error.message);
    const code = (error as NodeJS.ErrnoException).code;
    return failed(`could not reach ${url.host}: ${code ?? (error as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
}

function toResult(answer: GuardedResponse, secrets: readonly string[]): ToolResult {
  // Before the excerpt of an error answer is cut, which could keep a secret's head.
  const text = redactSecrets(decodeText(answer.body, answer.headers['content-type']), secrets);
  if (answer.status < 200 || answer.status > 299) {
    const excerpt = text.replace(/\s+/g, ' ').trim().slice(0, ERROR_EXCERPT_CHARS);
    return failed(`the tool answered HTTP ${answer.status}${excerpt ? `: ${excerpt}` : ''}`);
  }
  const mediaType =
    (answer.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (!isJson(mediaType) && !isText(mediaType)) {
    return failed(`the tool answered ${mediaType}, which is neither JSON nor text`);
  }
  if (answer.truncated) {
    return {
      content: `${text}\n[response truncated at ${HTTP_TOOL_MAX_RESPONSE_BYTES} bytes]`,
    };
  }
  if (text.trim() === '') return { content: `(the tool answered HTTP ${answer.status}, empty)` };
  return { content: isJson(mediaType) ? compactJson(text) : text };
}

/** JSON re-serialised without indentation, which only costs tokens; malformed JSON is passed on as text. */
function compactJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

function isJson(mediaType: string): boolean {
  return mediaType === 'application/json' || mediaType.endsWith('+json');
}

function isText(mediaType: string): boolean {
  return (
    mediaType === '' ||
    mediaType.startsWith('text/') ||
    mediaType === 'application/xml' ||
    mediaType.endsWith('+xml')
  );
}

function failed(content: string): ToolResult {
  return { content, isError: true };
}
