import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpToolRow } from '../../../src/store/schema.js';
import { toHttpTool } from '../../../src/tools/http-tool.js';
import { startToolServer, type ToolServer } from '../../support/tool-server.js';

let server: ToolServer;
beforeAll(async () => {
  server = await startToolServer();
});
afterAll(async () => server?.close());

function row(): HttpToolRow {
  return {
    id: randomUUID(),
    tenant_id: randomUUID(),
    name: 'lookup',
    description: 'Looks something up',
    parameters: { type: 'object' },
    url: `${server.origin}/lookup`,
    headers: {},
    timeout_ms: 2000,
    sequential: false,
    requires_approval: false,
    created_at: new Date(),
  };
}
const context = () => ({
  tenantId: 't',
  workflowId: 'w',
  step: 'turn-1',
  callId: 'c1',
  signal: new AbortController().signal,
});

describe('an HTTP tool answering text in a declared charset', () => {
  it('decodes the body with the charset of its Content-Type (as http_fetch does), not always as UTF-8', async () => {
    server.handle((_call, response) => {
      response.writeHead(200, { 'content-type': 'text/plain; charset=iso-8859-1' });
      response.end(Buffer.from([0x63, 0x61, 0x66, 0xe9])); // "café" in Latin-1
    });
    const result = await toHttpTool(row(), { allowedHosts: [], allowPrivate: true }).execute(
      {},
      context(),
    );
    expect(result).toEqual({ content: 'café' });
  });
});
