import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listenLocally, startTestAppOn, type TestApp } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { insertWorkflow, within } from '../support/event-streams.js';
import { connectRaw, type RawConnection } from '../support/raw-http.js';

/**
 * A request refused before its body was read (401 from auth, which runs
 * before the body is read; 413; 415) gets that one answer and its
 * connection is then closed, however the client goes on sending: Node
 * would otherwise go on reading the body on a keep-alive connection and,
 * REQUEST_TIMEOUT_MS later, write a 408 after the answer already given.
 * A refused request whose body had arrived whole keeps its connection.
 */

const TIMEOUT_MS = 1000;
/** Past the latest moment Node's request timeout would fire (1.25 timeouts), with room. */
const PAST_THE_TIMEOUT_MS = TIMEOUT_MS * 3;

let database: TestDatabase;
let testApp: TestApp;
let adminKey: string;
let tenantId: string;
let port: number;
const lines: Record<string, unknown>[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  testApp = await startTestAppOn(
    database,
    { REQUEST_TIMEOUT_MS: String(TIMEOUT_MS), BODY_LIMIT_BYTES: '1024' },
    pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
  );
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  adminKey = created.adminKey.secret;
  tenantId = created.tenant.id;
  ({ port } = await listenLocally(testApp.app));
});
afterAll(async () => {
  await testApp?.close();
  await database?.drop();
});

/** Each response's status line and headers, in the order the server wrote them. */
function responseHeads(received: string): string[] {
  return [...received.matchAll(/HTTP\/1\.1 \d{3} [\s\S]*?\r\n\r\n/g)].map(([head]) =>
    head.toLowerCase(),
  );
}

/** Writes the rest of a body a byte at a time, slower than the timeout allows, until told to stop. */
function trickle(connection: RawConnection, bytes: string): () => void {
  let stopped = false;
  void (async () => {
    for (const byte of bytes) {
      await sleep(150);
      if (stopped || connection.socket.destroyed) return;
      connection.socket.write(byte);
    }
  })();
  return () => {
    stopped = true;
  };
}

/**
 * Sends a POST whose body never arrives whole (trickling in, or stalling),
 * waits past the request timeout and returns every response head the
 * server wrote, after checking it closed the connection.
 */
async function refusedEarly(options: { headers: string; trickles: boolean }): Promise<string[]> {
  const connection = await connectRaw(port);
  connection.socket.write(
    `POST /v1/workflows HTTP/1.1\r\nHost: x\r\n${options.headers}Content-Length: 100\r\n\r\n{"input":`,
  );
  const stop = options.trickles ? trickle(connection, '"a slow upload that never ends"') : () => {};
  try {
    await sleep(PAST_THE_TIMEOUT_MS);
    // Closed by the server (not by this test) once it has answered.
    expect(connection.socket.destroyed).toBe(true);
    await within(connection.closed, 1000, 'the connection to close');
  } finally {
    stop();
    connection.socket.destroy();
  }
  return responseHeads(connection.received());
}

let linesBefore = 0;
beforeEach(() => {
  linesBefore = lines.length;
});

/** The log lines of a timeout written during the current test. */
function timeoutLines(): Record<string, unknown>[] {
  return lines
    .slice(linesBefore)
    .filter((line) => line.code === 'request_timeout' || line.status === 408);
}

describe('a request refused before its body has arrived', () => {
  it.each([
    {
      refusal: '401 to a body still trickling in',
      key: 'unknown',
      type: 'application/json',
      trickles: true,
      status: 401,
    },
    {
      refusal: '401 to a body that stalls',
      key: 'none',
      type: 'application/json',
      trickles: false,
      status: 401,
    },
    {
      refusal: '415 to a body of another type',
      key: 'admin',
      type: 'text/plain',
      trickles: true,
      status: 415,
    },
  ] as const)(
    '$refusal: that one answer, with Connection: close, the connection closed, and no 408 after it',
    async (refusal) => {
      const key = { admin: adminKey, unknown: 'wm_not_a_key', none: undefined }[refusal.key];
      const heads = await refusedEarly({
        headers: `${key ? `Authorization: Bearer ${key}\r\n` : ''}Content-Type: ${refusal.type}\r\n`,
        trickles: refusal.trickles,
      });
      expect(heads).toHaveLength(1);
      expect(heads[0]).toMatch(new RegExp(`^http/1\\.1 ${refusal.status} `));
      expect(heads[0]).toContain('connection: close');
      expect(timeoutLines()).toEqual([]);
    },
    15_000,
  );

  it('413 to a body over the limit: that one answer, the connection closed, and no 408 after it', async () => {
    const connection = await connectRaw(port);
    connection.socket.write(
      `POST /v1/workflows HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"input":',
    );
    const stop = trickle(connection, '"a body larger than the limit"');
    try {
      await within(connection.closed, PAST_THE_TIMEOUT_MS, 'the server to close the connection');
      await sleep(TIMEOUT_MS * 1.5);
    } finally {
      stop();
    }
    const heads = responseHeads(connection.received());
    expect(heads).toHaveLength(1);
    expect(heads[0]).toMatch(/^http\/1\.1 413 /);
    expect(timeoutLines()).toEqual([]);
  }, 15_000);
});

describe('a request refused after its body has arrived whole', () => {
  it('401: the connection stays open for the next request (keep-alive)', async () => {
    const connection = await connectRaw(port);
    const body = '{"input":"whole"}';
    connection.socket.write(
      'POST /v1/workflows HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wm_not_a_key\r\n' +
        `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    await sleep(500);
    connection.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await sleep(PAST_THE_TIMEOUT_MS);
    const heads = responseHeads(connection.received());
    connection.socket.destroy();
    expect(heads.map((head) => head.split(' ')[1])).toEqual(['401', '200']);
    expect(heads[0]).not.toContain('connection: close');
  }, 15_000);
});

describe('a malformed request behind an open event stream', () => {
  it('the connection is closed, with no 400 written into the stream', async () => {
    const id = await insertWorkflow(testApp, tenantId);
    const connection = await connectRaw(port);
    connection.socket.write(
      `GET /v1/workflows/${id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\n\r\n`,
    );
    await within(
      new Promise<void>((resolve) => {
        const check = () =>
          connection.received().includes('retry:') ? resolve() : setTimeout(check, 20);
        check();
      }),
      5000,
      'the stream to open',
    );
    // Pipelined on the same connection: not HTTP, a parser error.
    connection.socket.write('NOT HTTP AT ALL\r\n\r\n');
    await within(connection.closed, 5000, 'the server to close the connection');
    const heads = responseHeads(connection.received());
    expect(heads.map((head) => head.split(' ')[1])).toEqual(['200']);
    expect(connection.received()).not.toContain('malformed');
  });
});
