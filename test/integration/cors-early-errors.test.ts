import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApp, startTestAppOn, type TestApp } from '../support/app.js';
import { operatorTenant } from '../support/event-streams.js';

/**
 * Every response to an allowed origin carries Access-Control-Allow-Origin
 * (README), the errors answered before any hook runs included: the
 * router's own refusals (frameworkErrors) and a closing replica's 503.
 */

const ORIGIN = 'https://app.example.com';
let testApp: TestApp;
let key: string;

beforeAll(async () => {
  testApp = await startTestApp({ CORS_ALLOWED_ORIGINS: ORIGIN });
  ({ key } = await operatorTenant(testApp));
});
afterAll(async () => testApp?.close());

describe('CORS on every error to an allowed origin', () => {
  it('a path that is not valid percent-encoding (400 invalid_url)', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: '/v1/workflows/%zz',
      headers: { ...bearer(key), origin: ORIGIN },
    });
    expect(response.json().code).toBe('invalid_url');
    expect(response.headers['access-control-allow-origin']).toBe(ORIGIN);
  });

  it('a path parameter over 100 characters (414 path_parameter_too_long)', async () => {
    const response = await testApp.app.inject({
      method: 'GET',
      url: `/v1/workflows/${'a'.repeat(150)}`,
      headers: { ...bearer(key), origin: ORIGIN },
    });
    expect(response.json().code).toBe('path_parameter_too_long');
    expect(response.headers['access-control-allow-origin']).toBe(ORIGIN);
  });

  it('the 503 shutting_down of a replica that is closing', async () => {
    const replica = await startTestAppOn(testApp.database, { CORS_ALLOWED_ORIGINS: ORIGIN });
    await replica.app.listen({ host: '127.0.0.1', port: 0 });
    const address = replica.app.server.address();
    if (!address || typeof address === 'string') throw new Error('no port');
    const socket = net.connect(address.port, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
    });
    socket.write(
      'POST /v1/api-keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{',
    );
    await sleep(50);
    const closed = replica.close();
    await sleep(50);
    socket.write(`}GET /v1/me HTTP/1.1\r\nHost: x\r\nOrigin: ${ORIGIN}\r\n\r\n`);
    await once(socket, 'close');
    await closed;
    const responses = received.split(/(?=HTTP\/1\.1 )/);
    const head = (responses[1] ?? '').split('\r\n\r\n')[0] ?? '';
    expect(head).toMatch(/^HTTP\/1\.1 503 /);
    expect(head.toLowerCase()).toContain(`access-control-allow-origin: ${ORIGIN}`);
  });
});
