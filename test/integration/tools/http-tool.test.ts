import { randomUUID } from 'node:crypto';
import type { LookupAddress } from 'node:dns';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { toolParametersJsonSchema } from '../../../src/llm/tool-arguments.js';
import type { HttpToolRow } from '../../../src/store/schema.js';
import {
  HTTP_TOOL_MAX_RESPONSE_BYTES,
  type HttpToolPolicy,
  toHttpTool,
} from '../../../src/tools/http-tool.js';
import type { ToolContext } from '../../../src/tools/types.js';
import { startToolServer, type ToolServer } from '../../support/tool-server.js';

let server: ToolServer;
beforeAll(async () => {
  server = await startToolServer();
});
afterAll(async () => server?.close());
beforeEach(() => {
  server.calls.length = 0;
  server.handle((call, response) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ received: JSON.parse(call.body) }, null, 2));
  });
});

const parameters = {
  type: 'object',
  properties: {
    city: { type: 'string', description: 'City name' },
    days: { type: 'integer', minimum: 1, maximum: 10 },
    units: { enum: ['metric', 'imperial'] },
  },
  required: ['city'],
  additionalProperties: false,
};

function toolRow(overrides: Partial<HttpToolRow> = {}): HttpToolRow {
  return {
    id: randomUUID(),
    tenant_id: randomUUID(),
    name: 'forecast',
    description: 'Weather forecast of a city',
    parameters,
    url: `${server.origin}/forecast?v=2`,
    headers: { Authorization: 'Bearer tool-secret', 'X-Team': 'core' },
    timeout_ms: 5000,
    sequential: false,
    requires_approval: false,
    created_at: new Date(),
    ...overrides,
  };
}

const localPolicy: HttpToolPolicy = { allowedHosts: [], allowPrivate: true };

function context(overrides: Partial<ToolContext> = {}): ToolContext {
  return {
    tenantId: randomUUID(),
    workflowId: 'wf-1',
    step: 'turn-3',
    callId: 'call_7',
    signal: new AbortController().signal,
    ...overrides,
  };
}

describe('HTTP tool as a Tool', () => {
  it('offers the model the JSON Schema as given and validates arguments with it', () => {
    const tool = toHttpTool(toolRow({ sequential: true, timeout_ms: 1234 }), localPolicy);
    // The loop's own timeout is a second longer, so the tool's clearer message wins.
    expect(tool).toMatchObject({ name: 'forecast', sequential: true, timeoutMs: 2234 });
    expect(toolParametersJsonSchema(tool)).toEqual(parameters);
    expect(tool.parameters.safeParse({ city: 'Oslo', days: 3, units: 'metric' }).success).toBe(
      true,
    );
    for (const bad of [{}, { city: 'Oslo', days: 2.5 }, { city: 'Oslo', units: 'kelvin' }]) {
      expect(tool.parameters.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
    expect(tool.parameters.safeParse({ city: 'Oslo', extra: 1 }).success).toBe(false);
  });

  it('a property named id is an ordinary property, not the draft-4 keyword', () => {
    const withId = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] };
    const tool = toHttpTool(toolRow({ parameters: withId }), localPolicy);
    expect(toolParametersJsonSchema(tool)).toMatchObject(withId);
    expect(tool.parameters.safeParse({ id: 'a' }).success).toBe(true);
    expect(tool.parameters.safeParse({ id: 1 }).success).toBe(false);
  });
});

describe('calling an HTTP tool', () => {
  it('POSTs the arguments as JSON with the stored headers and an Idempotency-Key of workflow, step and call', async () => {
    const tool = toHttpTool(toolRow(), localPolicy);
    const result = await tool.execute({ city: 'Oslo', days: 3 }, context());
    expect(result).toEqual({ content: '{"received":{"city":"Oslo","days":3}}' });
    expect(server.calls).toHaveLength(1);
    const [call] = server.calls;
    expect(call).toMatchObject({ method: 'POST', path: '/forecast?v=2' });
    expect(JSON.parse(call?.body ?? '')).toEqual({ city: 'Oslo', days: 3 });
    expect(call?.headers).toMatchObject({
      'idempotency-key': 'wf-1:turn-3:call_7',
      'content-type': 'application/json',
      authorization: 'Bearer tool-secret',
      'x-team': 'core',
    });
  });

  it('sends the same Idempotency-Key when the same step runs again, another for another call', async () => {
    const tool = toHttpTool(toolRow(), localPolicy);
    await tool.execute({ city: 'Oslo' }, context());
    await tool.execute({ city: 'Oslo' }, context());
    await tool.execute({ city: 'Oslo' }, context({ callId: 'call_8' }));
    expect(server.calls.map((call) => call.headers['idempotency-key'])).toEqual([
      'wf-1:turn-3:call_7',
      'wf-1:turn-3:call_7',
      'wf-1:turn-3:call_8',
    ]);
  });

  it('returns a text answer as it is', async () => {
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      response.end('Sunny, 21 °C');
    });
    const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(result).toEqual({ content: 'Sunny, 21 °C' });
  });

  it('a tool slower than its timeout gives an error result, not a throw', async () => {
    server.handle(() => {
      // Never answers.
    });
    const started = Date.now();
    const result = await toHttpTool(toolRow({ timeout_ms: 200 }), localPolicy).execute(
      { city: 'Oslo' },
      context(),
    );
    expect(result).toEqual({
      isError: true,
      content: 'the tool did not answer within 200 ms',
    });
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('an aborted call (workflow cancelled) stops at once with an error result', async () => {
    server.handle(() => {
      // Never answers.
    });
    const controller = new AbortController();
    const pending = toHttpTool(toolRow(), localPolicy).execute(
      { city: 'Oslo' },
      context({ signal: controller.signal }),
    );
    setTimeout(() => controller.abort(new Error('cancelled')), 50);
    expect(await pending).toEqual({ isError: true, content: 'the call was cancelled' });
  });

  it('a non-2xx answer gives an error result with the status and a short excerpt of the body', async () => {
    server.handle((_call, response) => {
      response.writeHead(503, { 'content-type': 'text/plain' });
      response.end(`upstream   down\n${'x'.repeat(5000)}`);
    });
    const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^the tool answered HTTP 503: upstream down x+$/);
    expect(result.content.length).toBeLessThan(400);
  });

  it('does not follow redirects', async () => {
    server.handle((call, response) => {
      if (call.path === '/elsewhere') {
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('followed');
        return;
      }
      response.writeHead(307, { location: '/elsewhere' });
      response.end();
    });
    const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(result).toEqual({ isError: true, content: 'the tool answered HTTP 307' });
    expect(server.calls.map((call) => call.path)).toEqual(['/forecast?v=2']);
  });

  it('cuts an answer larger than 1 MiB and says so', async () => {
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.end('a'.repeat(HTTP_TOOL_MAX_RESPONSE_BYTES + 100_000));
    });
    const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(result.isError).toBeUndefined();
    expect(result.content).toMatch(/\n\[response truncated at 1048576 bytes\]$/);
    expect(result.content.startsWith('a'.repeat(HTTP_TOOL_MAX_RESPONSE_BYTES))).toBe(true);
  });

  it('decodes an answer its server compressed unasked (gzip, deflate, br); the size limit counts decoded bytes', async () => {
    const json = JSON.stringify({ city: 'Oslo', sky: 'sunny' });
    for (const [encoding, encode] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
      ['br', brotliCompressSync],
    ] as const) {
      server.handle((_call, response) => {
        response.writeHead(200, {
          'content-type': 'application/json',
          'content-encoding': encoding,
        });
        response.end(encode(json));
      });
      const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
      expect(result, encoding).toEqual({ content: json });
    }
    // 10 MiB of one letter compress to ~10 KB: cut at 1 MiB of text all the same.
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' });
      response.end(gzipSync('a'.repeat(10 * 1024 * 1024)));
    });
    const bomb = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(bomb.content).toMatch(/\n\[response truncated at 1048576 bytes\]$/);
  });

  it('an encoding it cannot decode, or a corrupt compressed body, gives an error result', async () => {
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'zstd' });
      response.end('(zstd bytes)');
    });
    const unknown = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(unknown).toEqual({
      isError: true,
      content: 'the answer is encoded as "zstd", which is not decoded',
    });
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' });
      response.end('not gzip at all');
    });
    const corrupt = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(corrupt.isError).toBe(true);
  });

  it('refuses a binary answer', async () => {
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'image/png' });
      response.end(Buffer.from([0x89, 0x50, 0x4e, 0x47]));
    });
    const result = await toHttpTool(toolRow(), localPolicy).execute({ city: 'Oslo' }, context());
    expect(result).toEqual({
      isError: true,
      content: 'the tool answered image/png, which is neither JSON nor text',
    });
  });

  it('an unreachable tool gives an error result', async () => {
    const closed = await startToolServer();
    await closed.close();
    const result = await toHttpTool(toolRow({ url: `${closed.origin}/x` }), localPolicy).execute(
      {},
      context(),
    );
    expect(result).toEqual({
      isError: true,
      content: `could not reach 127.0.0.1:${closed.port}: ECONNREFUSED`,
    });
  });
});

describe('where an HTTP tool may connect', () => {
  it('a host outside HTTP_TOOLS_ALLOWED_HOSTS is refused at call time, before any connection', async () => {
    const tool = toHttpTool(toolRow(), { allowedHosts: ['tools.example.com'], allowPrivate: true });
    const result = await tool.execute({ city: 'Oslo' }, context());
    expect(result).toEqual({
      isError: true,
      content: 'refused: 127.0.0.1 is not among the hosts HTTP tools may call',
    });
    expect(server.calls).toHaveLength(0);
  });

  it('a loopback address is refused unless HTTP_TOOLS_ALLOW_PRIVATE is set', async () => {
    const tool = toHttpTool(toolRow(), { allowedHosts: [], allowPrivate: false });
    const result = await tool.execute({ city: 'Oslo' }, context());
    expect(result).toEqual({
      isError: true,
      content: 'refused: 127.0.0.1 is a loopback address, which tools may not reach',
    });
    expect(server.calls).toHaveLength(0);
  });

  it('a host name resolving to a private address is refused, even when another address is public', async () => {
    const resolved: string[] = [];
    const resolver = async (hostname: string): Promise<LookupAddress[]> => {
      resolved.push(hostname);
      return [
        { address: '93.184.215.14', family: 4 },
        { address: '127.0.0.1', family: 4 },
      ];
    };
    const tool = toHttpTool(toolRow({ url: `http://tools.example.test:${server.port}/forecast` }), {
      allowedHosts: ['*.example.test'],
      allowPrivate: false,
      resolver,
    });
    const result = await tool.execute({ city: 'Oslo' }, context());
    expect(result).toEqual({
      isError: true,
      content:
        'refused: tools.example.test resolves to 127.0.0.1 is a loopback address, which tools may not reach',
    });
    expect(resolved).toEqual(['tools.example.test']);
    expect(server.calls).toHaveLength(0);
  });

  it('connects to the address the check resolved (pinned), never resolving the name again', async () => {
    let lookups = 0;
    const resolver = async (): Promise<LookupAddress[]> => {
      lookups += 1;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    // `.test` names never resolve in real DNS: reaching the server proves the connection used the checked address.
    const tool = toHttpTool(toolRow({ url: `http://tools.example.test:${server.port}/forecast` }), {
      allowedHosts: ['*.example.test'],
      allowPrivate: true,
      resolver,
    });
    const result = await tool.execute({ city: 'Oslo' }, context());
    expect(result.isError).toBeUndefined();
    expect(lookups).toBe(1);
    expect(server.calls[0]?.headers.host).toBe(`tools.example.test:${server.port}`);
  });
});
