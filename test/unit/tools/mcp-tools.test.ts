import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/logger.js';
import { toolResultFromMcp } from '../../../src/tools/mcp-tool-result.js';
import { connectMcpServer, McpUnreachable, mcpToolProblem } from '../../../src/tools/mcp-tools.js';

describe('toolResultFromMcp', () => {
  it('joins text content and summarises the rest', () => {
    expect(
      toolResultFromMcp({
        content: [
          { type: 'text', text: 'first' },
          { type: 'audio', data: 'AAAAAA==', mimeType: 'audio/wav' },
          { type: 'resource_link', uri: 'file:///a.txt', name: 'a' },
          { type: 'resource', resource: { uri: 'file:///b.txt', text: 'embedded' } },
          { type: 'resource', resource: { uri: 'file:///c.bin', blob: 'AA==', mimeType: 'x/y' } },
        ],
      }),
    ).toEqual({
      content: [
        'first',
        '[audio content, audio/wav, 4 bytes, not shown]',
        '[resource link: file:///a.txt (a)]',
        'embedded',
        '[resource file:///c.bin, x/y, binary, not shown]',
      ].join('\n'),
    });
  });

  it('keeps isError, falls back to structured content, and says when there is nothing', () => {
    expect(toolResultFromMcp({ content: [{ type: 'text', text: 'bad' }], isError: true })).toEqual({
      content: 'bad',
      isError: true,
    });
    expect(toolResultFromMcp({ content: [], structuredContent: { n: 1 } })).toEqual({
      content: '{"n":1}',
    });
    expect(toolResultFromMcp({ content: [] })).toEqual({
      content: '(the tool returned no content)',
    });
    expect(toolResultFromMcp({ toolResult: { legacy: true } })).toEqual({
      content: '{"legacy":true}',
    });
  });
});

describe('mcpToolProblem', () => {
  const schema = { type: 'object', properties: {} };
  it('accepts a name that fits the vendors’ rules once prefixed', () => {
    expect(mcpToolProblem('docs', { name: 'search', inputSchema: schema })).toBeUndefined();
  });
  it('refuses names with dots or past 64 characters, and schemas that do not convert', () => {
    expect(mcpToolProblem('docs', { name: 'files.read', inputSchema: schema })).toContain(
      'not a valid tool name',
    );
    expect(mcpToolProblem('docs', { name: 'x'.repeat(60), inputSchema: schema })).toContain(
      'not a valid tool name',
    );
    expect(mcpToolProblem('docs', { name: 'ok', inputSchema: { type: 'string' } })).toContain(
      'input schema',
    );
  });
  it('refuses a tool without a name, which would be offered as the bare prefix', () => {
    expect(mcpToolProblem('docs', { name: '', inputSchema: schema })).toBe('the tool has no name');
  });
});

describe('connectMcpServer', () => {
  it('refuses a hostname that resolves to a private address before connecting', async () => {
    const attempt = connectMcpServer(
      { name: 'rebound', url: 'http://mcp.example.com/mcp', headers: {}, timeout_ms: 1000 },
      {
        policy: {
          allowedHosts: [],
          allowPrivate: false,
          resolver: async () => [{ address: '10.0.0.7', family: 4 }],
        },
        log: pino({ level: 'silent' }),
      },
    );
    await expect(attempt).rejects.toThrow(McpUnreachable);
    await expect(attempt).rejects.toThrow(
      'refused: mcp.example.com resolves to 10.0.0.7 is a private address, which tools may not reach',
    );
  });

  it('a server refusing with the token it was sent: the error carries it redacted, logged as err too', async () => {
    const token = 'mcp-token-quoted-back-7731';
    const server = createServer((request, response) => {
      response.writeHead(401, { 'content-type': 'text/plain' });
      response.end(`invalid token: ${request.headers.authorization}`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const lines: string[] = [];
    const log = createLogger(
      { LOG_LEVEL: 'info' },
      {
        destination: new Writable({
          write(chunk, _encoding, done) {
            lines.push(String(chunk));
            done();
          },
        }),
      },
    );
    try {
      const error = await connectMcpServer(
        {
          name: 'refusing',
          url: `http://127.0.0.1:${port}/mcp`,
          headers: { Authorization: `Bearer ${token}` },
          timeout_ms: 5000,
        },
        { policy: { allowedHosts: [], allowPrivate: true }, log: pino({ level: 'silent' }) },
      ).then(
        () => undefined,
        (failure: unknown) => failure,
      );
      expect(error).toBeInstanceOf(McpUnreachable);
      expect(String((error as Error).message)).toContain('[redacted]');
      log.error({ err: error }, 'connecting failed');
      expect(lines).toHaveLength(1);
      expect(lines[0]).not.toContain(token);
    } finally {
      server.close();
    }
  });
});

describe('the size of an MCP tool offered to the model', () => {
  it('an input schema far past what an HTTP tool may have (32 KiB as JSON) is a problem, not offered at every turn', () => {
    const properties = Object.fromEntries(
      Array.from({ length: 2000 }, (_, i) => [
        `field_${i}`,
        { type: 'string', description: 'padding '.repeat(10) },
      ]),
    );
    const inputSchema = { type: 'object', properties };
    expect(JSON.stringify(inputSchema).length).toBeGreaterThan(150_000);
    expect(mcpToolProblem('docs', { name: 'huge', inputSchema })).toBeDefined();
  });
});
