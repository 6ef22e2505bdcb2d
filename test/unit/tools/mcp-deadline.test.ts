import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_LISTED_TOOLS } from '../../../src/tools/mcp-list-tools.js';
import { connectMcpServer } from '../../../src/tools/mcp-tools.js';
import {
  acceptNotification,
  INITIALIZE_RESULT,
  type RawMcpScript,
  type RawMcpServer,
  replyResult,
  startRawMcpServer,
} from '../../support/raw-mcp-server.js';

/**
 * Connecting to an MCP server and listing its tools ends within the
 * server's timeout as a whole, whatever the server does: each request has
 * that timeout, but a server may answer every page with a next cursor or
 * never answer a notification the SDK waits for.
 */

let server: RawMcpServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const options = {
  policy: { allowedHosts: [], allowPrivate: true },
  log: pino({ level: 'silent' }),
};

async function connectTo(script: RawMcpScript, timeoutMs: number) {
  server = await startRawMcpServer(script);
  return connectMcpServer(
    { name: 'raw', url: server.url, headers: {}, timeout_ms: timeoutMs },
    options,
  );
}

/** A server listing one tool a page, with a next cursor on every page before the `last`. */
function pagingServer(last: number): { script: RawMcpScript; pages: () => number } {
  let pages = 0;
  const script: RawMcpScript = (message, response) => {
    if (message.method === 'initialize')
      return replyResult(response, message.id, INITIALIZE_RESULT);
    if (message.id === undefined) return acceptNotification(response);
    pages += 1;
    replyResult(response, message.id, {
      tools: [{ name: `t${pages}`, inputSchema: { type: 'object' } }],
      ...(pages < last ? { nextCursor: `page-${pages}` } : {}),
    });
  };
  return { script, pages: () => pages };
}

describe('connecting to a hostile MCP server', () => {
  it('a tools/list that always answers a next cursor fails once past MAX_LISTED_TOOLS', async () => {
    const paging = pagingServer(Number.POSITIVE_INFINITY);
    const connecting = connectTo(paging.script, 60_000);
    await expect(connecting).rejects.toThrow(`it lists more than ${MAX_LISTED_TOOLS} tools`);
    expect(paging.pages()).toBe(MAX_LISTED_TOOLS + 1);
  });

  it('pages of one listing leave no abort listeners piled on one signal (no MaxListenersExceededWarning)', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const connected = await connectTo(pagingServer(20).script, 60_000);
      expect(connected.tools).toHaveLength(20);
      await connected.close();
      // Emitted on the next tick of the process.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).not.toContain('MaxListenersExceededWarning');
  });

  it('a server that never answers the notifications/initialized POST fails at the timeout', async () => {
    const connecting = connectTo((message, response) => {
      if (message.method === 'initialize')
        return replyResult(response, message.id, INITIALIZE_RESULT);
      if (message.method === 'notifications/initialized') return; // never answered
      replyResult(response, message.id, {
        tools: [{ name: 'ok', inputSchema: { type: 'object' } }],
      });
    }, 300);
    await expect(connecting).rejects.toThrow('did not answer in time');
  });
});
