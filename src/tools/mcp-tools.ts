import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { redactSecrets, redactSecretsIn } from '../redaction.js';
import type { McpServerRow, McpToolSnapshot } from '../store/schema.js';
import { within } from '../within.js';
import { createGuardedFetch } from './guarded-fetch.js';
import { untilAborted } from './guarded-request.js';
import { headerSecrets } from './header-secrets.js';
import { type HttpToolPolicy, idempotencyKey, isHostAllowed } from './http-tool.js';
import { InvalidParametersSchema, parametersFromJsonSchema } from './json-schema-parameters.js';
import { MCP_CALL_ID_META, MCP_CALL_KEY_META, McpCallStreams } from './mcp-call-streams.js';
import { describeFailure, isTimeout, redactedMessage } from './mcp-failure.js';
import { listTools } from './mcp-list-tools.js';
import type { McpToolLists } from './mcp-tool-lists.js';
import { toolResultFromMcp } from './mcp-tool-result.js';
import { TOOL_NAME } from './registry.js';
import type { Tool, ToolContext, ToolResult } from './types.js';

/**
 * A tenant's MCP servers as `Tool`s of one workflow run: each server is
 * connected once (streamable HTTP, through the network guard), its tools
 * listed and offered as `<server>__<tool>`; a call goes over that same
 * connection. `close()` ends every connection when the run ends.
 *
 * One connection per server per run, not one shared by the process: MCP
 * sessions are stateful on the server side (a tool may remember what the
 * previous call did), so runs must not see each other's session; and a
 * connection that lives as long as the run needs no pool, no reconnect
 * policy and no eviction. The cost is an initialize round trip (plus
 * `tools/list`) per server at the start of every run, before its first
 * model call; with MCP_TOOLS_CACHE_MS a run offers the tools a server
 * listed for an earlier run instead, and connects to it only when one of
 * them is called (mcp-tool-lists.ts).
 */

/** Bytes of one MCP response (a tool result or a listing); past them the call fails. */
export const MCP_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;
/** Between the server's name and the tool's in the name the model sees. */
export const MCP_TOOL_NAME_SEPARATOR = '__';
/** The vendors' limit on a description is larger; every character is sent at each turn. */
const MAX_DESCRIPTION_CHARS = 4000;
const CLIENT_INFO = { name: 'waymark', version: '0.1.0' };

export interface McpToolset {
  tools: Tool[];
  /** Servers that could not be reached or listed, for a `warning` event; their tools are missing. */
  unavailable: { server: string; reason: string }[];
  /** Closes every connection; call it once the run ends, however it ends. Never throws. */
  close(): Promise<void>;
}

export interface McpConnectOptions {
  policy: HttpToolPolicy;
  log: Logger;
}

/** An open connection to one MCP server. */
export interface McpConnection {
  client: Client;
  /** Tells a call that its answering stream ended without its result. */
  calls: McpCallStreams;
  tools: McpToolSnapshot[];
  close(): Promise<void>;
}

/** What a tool call goes over. */
type CallChannel = Pick<McpConnection, 'client' | 'calls'>;

/**
 * Connects to one server and lists its tools, within the server's timeout
 * for the whole of it: each request has that timeout, but a server may
 * answer every `tools/list` with a next cursor, or never answer the
 * `notifications/initialized` the SDK waits for. Throws `McpUnreachable`
 * with a reason fit for the tenant. The server's header values are
 * redacted from the reason and from the tools it lists (header-secrets.ts).
 */
export async function connectMcpServer(
  server: Pick<McpServerRow, 'name' | 'url' | 'headers' | 'timeout_ms'>,
  options: McpConnectOptions & {
    signal?: AbortSignal;
    /** False: connect only (the run knows the tools already); `tools` is then empty. */
    list?: boolean;
  },
): Promise<McpConnection> {
  const url = new URL(server.url);
  // Checked again at each run: the allowlist may have shrunk since registration.
  if (!isHostAllowed(url.hostname, options.policy)) {
    throw new McpUnreachable(`${url.hostname} is not among the hosts tools may call`);
  }
  const calls = new McpCallStreams();
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: calls.watch(
      createGuardedFetch({
        allowPrivate: options.policy.allowPrivate,
        resolver: options.policy.resolver,
        maxBytes: MCP_MAX_RESPONSE_BYTES,
      }),
    ),
    requestInit: { headers: server.headers },
  });
  const client = new Client(CLIENT_INFO);
  const deadline = AbortSignal.timeout(server.timeout_ms);
  const signal = options.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
  const requestOptions = { timeout: server.timeout_ms, signal };
  const secrets = headerSecrets(server.headers);
  const opening = (async () => {
    await client.connect(transport, requestOptions);
    if (options.list === false) return [];
    const listed = await listTools(client, requestOptions, (skipped) =>
      options.log.warn(
        { mcpServer: server.name, ...redactSecretsIn(skipped, secrets) },
        'MCP tool skipped',
      ),
    );
    // A listing made for its caller may quote the credentials; it is shown to members, stored and prompted.
    return redactSecretsIn(listed, secrets);
  })();
  try {
    const tools = await untilAborted(opening, signal);
    return {
      client,
      calls,
      tools,
      close: () => closeConnection(client, transport, { log: options.log, secrets }),
    };
  } catch (error) {
    // Given up on: what it still awaits fails as the connection closes.
    opening.catch(() => undefined);
    await closeConnection(client, transport, { log: options.log, secrets });
    const reason = deadline.aborted
      ? `${url.host} did not answer in time`
      : describeFailure(error, { url, secrets });
    // No `cause`: the SDK's or fetch's error may quote the server's header
    // values, which only `reason` has redacted; logged as `err` one day, its
    // cause's message and stack would be printed with it.
    throw new McpUnreachable(reason);
  }
}

/**
 * The tenant's servers and their tools exposed, for one workflow run. A
 * server whose tools `lists` holds (MCP_TOOLS_CACHE_MS) is connected only
 * when the model first calls one of them (lazyConnection); the others are
 * connected and listed now, and their lists remembered there.
 */
export async function connectMcpTools(
  servers: McpServerRow[],
  options: McpConnectOptions & { lists?: McpToolLists },
): Promise<McpToolset> {
  const settled = await Promise.allSettled(
    servers.map(async (server): Promise<ServerTools> => {
      const remembered = options.lists?.fresh(server);
      if (remembered) return { tools: remembered, ...lazyConnection(server, options) };
      const connection = await connectMcpServer(server, options);
      options.lists?.remember(server, connection.tools);
      return {
        tools: connection.tools,
        channel: async () => connection,
        close: connection.close,
      };
    }),
  );
  const tools: Tool[] = [];
  const unavailable: McpToolset['unavailable'] = [];
  const opened: ServerTools[] = [];
  const names = new Set<string>();
  settled.forEach((outcome, index) => {
    const server = servers[index] as McpServerRow;
    if (outcome.status === 'rejected') {
      const reason = (outcome.reason as Error).message;
      options.log.warn({ mcpServer: server.name, reason }, 'MCP server unavailable for this run');
      unavailable.push({ server: server.name, reason });
      return;
    }
    const serverTools = outcome.value;
    opened.push(serverTools);
    for (const snapshot of serverTools.tools) {
      const exposed = exposeMcpTool(server, snapshot, serverTools.channel);
      // A server listing a name twice, or (registered before server names lost `__` and a
      // trailing `_`) `a` + `_b` and `a_` + `b`: the first listed (servers by name) keeps it.
      if (exposed.ok && names.has(exposed.tool.name)) {
        options.log.warn(
          { mcpServer: server.name, tool: snapshot.name },
          'MCP tool skipped: a tool of that name is offered already, by this server or another',
        );
      } else if (exposed.ok) {
        names.add(exposed.tool.name);
        tools.push(exposed.tool);
      } else {
        options.log.warn(
          { mcpServer: server.name, tool: snapshot.name, reason: exposed.reason },
          'MCP tool skipped',
        );
      }
    }
  });
  return {
    tools,
    unavailable,
    close: async () => {
      await Promise.all(opened.map((serverTools) => serverTools.close()));
    },
  };
}

/** One server's tools for a run, and the run's connection that their calls go over. */
interface ServerTools {
  tools: McpToolSnapshot[];
  channel(): Promise<CallChannel>;
  /** Ends the connection, if one was opened. Never throws. */
  close(): Promise<void>;
}

/**
 * The run's connection to a server whose tools were remembered: opened by
 * the first call that needs it and shared by the run's later calls. A
 * failure to connect is that call's error result; the next call tries
 * again. Nothing is opened once the run has ended.
 */
function lazyConnection(
  server: McpServerRow,
  options: McpConnectOptions,
): Omit<ServerTools, 'tools'> {
  let opening: Promise<McpConnection> | undefined;
  let ended = false;
  return {
    channel() {
      if (ended) return Promise.reject(new McpUnreachable('the run has ended'));
      const attempt = opening ?? connectMcpServer(server, { ...options, list: false });
      opening = attempt;
      return attempt.then(
        (connection) => connection,
        (error: unknown) => {
          if (opening === attempt) opening = undefined;
          throw error;
        },
      );
    },
    async close() {
      ended = true;
      const connection = await opening?.catch(() => undefined);
      await connection?.close();
    },
  };
}

/** The name the model sees for a server's tool. */
export function mcpToolName(serverName: string, toolName: string): string {
  return `${serverName}${MCP_TOOL_NAME_SEPARATOR}${toolName}`;
}

/**
 * Whether a listed tool can be offered to the model, and why not: its
 * prefixed name must be a valid function name for both vendors, and its
 * input schema must convert. Renaming a tool to fit would let two tools
 * collide, so such a tool is skipped and reported instead.
 */
export function mcpToolProblem(serverName: string, snapshot: McpToolSnapshot): string | undefined {
  // The prefix alone (`docs__`) would pass the name rule below.
  if (snapshot.name === '') return 'the tool has no name';
  const name = mcpToolName(serverName, snapshot.name);
  if (!TOOL_NAME.test(name)) {
    return `"${name}" is not a valid tool name (1 to 64 letters, digits, _ or -)`;
  }
  try {
    parametersFromJsonSchema(snapshot.inputSchema);
  } catch (error) {
    if (error instanceof InvalidParametersSchema) return `input schema: ${error.message}`;
    throw error;
  }
  return undefined;
}

type Exposed = { ok: true; tool: Tool } | { ok: false; reason: string };

function exposeMcpTool(
  server: McpServerRow,
  snapshot: McpToolSnapshot,
  channel: () => Promise<CallChannel>,
): Exposed {
  const problem = mcpToolProblem(server.name, snapshot);
  if (problem !== undefined) return { ok: false, reason: problem };
  const description = (
    snapshot.description?.trim() || `The "${snapshot.name}" tool of the ${server.name} MCP server`
  ).slice(0, MAX_DESCRIPTION_CHARS);
  const secrets = headerSecrets(server.headers);
  return {
    ok: true,
    tool: {
      name: mcpToolName(server.name, snapshot.name),
      description,
      parameters: parametersFromJsonSchema(snapshot.inputSchema),
      requiresApproval: server.requires_approval,
      // A second more than the call's own timeout, so the loop gets this tool's clearer message first.
      timeoutMs: server.timeout_ms + 1000,
      execute: async (args, ctx) => {
        const result = await callMcpTool({
          channel,
          server,
          toolName: snapshot.name,
          args: args as object,
          ctx,
        });
        // What the server answered, its failures' messages included, may quote its header values.
        return { ...result, content: redactSecrets(result.content, secrets) };
      },
    },
  };
}

async function callMcpTool(call: {
  channel: () => Promise<CallChannel>;
  server: McpServerRow;
  toolName: string;
  args: object;
  ctx: ToolContext;
}): Promise<ToolResult> {
  const { server, ctx } = call;
  const callId = randomUUID();
  const lost = new AbortController();
  let unwatch = () => {};
  try {
    const { client, calls } = await call.channel();
    unwatch = calls.onLost(callId, () => lost.abort());
    const result = await client.callTool(
      {
        name: call.toolName,
        arguments: call.args as Record<string, unknown>,
        _meta: { [MCP_CALL_KEY_META]: idempotencyKey(ctx), [MCP_CALL_ID_META]: callId },
      },
      undefined,
      { signal: AbortSignal.any([ctx.signal, lost.signal]), timeout: server.timeout_ms },
    );
    return toolResultFromMcp(result as CallToolResult);
  } catch (error) {
    if (ctx.signal.aborted) return failed('the call was cancelled');
    if (lost.signal.aborted) {
      return failed(`the ${server.name} MCP server closed the call before answering`);
    }
    if (error instanceof McpUnreachable) {
      return failed(`the ${server.name} MCP server could not be reached: ${error.message}`);
    }
    if (isTimeout(error)) return failed(`the tool did not answer within ${server.timeout_ms} ms`);
    return failed(`the ${server.name} MCP server failed: ${(error as Error).message}`);
  } finally {
    unwatch();
  }
}

/**
 * A server that cannot be connected to or listed. Its message has the
 * server's header values redacted, and it carries nothing else of the
 * failure: pino's `err` serializer prints a cause's message and stack, and
 * the log's scrub knows no tenant's secrets.
 */
export class McpUnreachable extends Error {
  override name = 'McpUnreachable';
}

/** How long the end of a run waits for a server to end its MCP session. */
const TERMINATE_SESSION_WAIT_MS = 2000;

/**
 * Ends the server's session (a DELETE, so a stateful server frees it now
 * rather than at its idle timeout), then closes the client, which aborts
 * whatever is still in flight. The wait is bounded: a run's end must not
 * hang on a slow server. A failure is logged as its message with the
 * server's header values redacted (`secrets`): the SDK's errors quote
 * what the server answered (a refused DELETE's status line), and the
 * log's own scrub knows no tenant's secrets.
 */
async function closeConnection(
  client: Client,
  transport: StreamableHTTPClientTransport,
  options: { log: Logger; secrets: readonly string[] },
): Promise<void> {
  const { log, secrets } = options;
  if (transport.sessionId !== undefined) {
    const terminated = transport
      .terminateSession()
      .catch((error: unknown) =>
        log.debug({ reason: redactedMessage(error, secrets) }, 'ending an MCP session failed'),
      );
    await within(terminated, TERMINATE_SESSION_WAIT_MS);
  }
  try {
    await client.close();
  } catch (error) {
    // Closing aborts in-flight requests; a failure here leaks nothing worth failing the run for.
    log.debug({ reason: redactedMessage(error, secrets) }, 'closing an MCP connection failed');
  }
}

function failed(content: string): ToolResult {
  return { content, isError: true };
}
