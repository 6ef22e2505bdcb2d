import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally, startTestAppOn } from '../support/app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

const ORIGIN = 'https://app.example.com';
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => database?.drop());

describe('a replica that is closing', () => {
  it('answers a request arriving on an open connection with 503 shutting_down as problem+json, and closes the connection; the request in flight completes', async () => {
    const replica = await startTestAppOn(database, { CORS_ALLOWED_ORIGINS: ORIGIN });
    const created = await replica.services.tenancy.bootstrap();
    if (!created) throw new Error('bootstrap created nothing on an empty database');
    const { port } = await listenLocally(replica.app);
    const socket = net.connect(port, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
    });
    // In flight: its body is not all there yet. With a key, so that it is
    // not refused before its body is read (which closes the connection,
    // app.ts) but waits for the rest of it.
    socket.write(
      `POST /v1/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${created.adminKey.secret}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 12\r\n\r\n{"name":"k"',
    );
    await sleep(50);
    const closed = replica.close();
    await sleep(50);
    // The rest of the first body, and a second request behind it on the same connection.
    socket.write(`}GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: ${ORIGIN}\r\n\r\n`);
    await once(socket, 'close');
    await closed;

    const responses = received.split(/(?=HTTP\/1\.1 )/);
    expect(responses).toHaveLength(2);
    // The first was routed before the close: it runs as usual, its key made.
    expect(responses[0]).toMatch(/^HTTP\/1\.1 201 /);
    const [head = '', body = ''] = (responses[1] ?? '').split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 503 /);
    expect(head.toLowerCase()).toContain('content-type: application/problem+json');
    expect(head.toLowerCase()).toContain('retry-after: 1');
    expect(head.toLowerCase()).toContain('connection: close');
    // Marked for the page's origin, so it can read the problem and its Retry-After.
    expect(head.toLowerCase()).toContain(`access-control-allow-origin: ${ORIGIN}`);
    expect(JSON.parse(body)).toMatchObject({
      status: 503,
      code: 'shutting_down',
      // Why, not "An internal error occurred": the client should retry, not report a bug.
      detail: expect.stringMatching(/shutting down/),
    });
  });
});
