import { it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTestApp } from '../support/app.js';
import { insertWorkflow, listen, openStream, operatorTenant, trackerOn } from '../support/event-streams.js';

it('scratch', async () => {
  for (const variant of ['abort-live']) {
    const testApp = await startTestApp({ SSE_RETRY_MS: '10' });
    const baseUrl = await listen(testApp);
    const sockets: import('node:net').Socket[] = [];
    testApp.app.server.on('connection', (s) => { (s as any).connectedAt = Date.now(); console.log('conn at', Date.now()); sockets.push(s); s.on('close', () => console.log('server socket closed', Date.now())); });
    const { tenantId, key } = await operatorTenant(testApp);
    const workflowId = await insertWorkflow(testApp, tenantId);
    const t = trackerOn(testApp, { tenantId, workflowId });
    if (variant === 'abort-replay') { await t.begin(); for (let i = 0; i < 20; i++) await t.emit('tool_call', 's', 'completed'); await t.end({ status: 'completed', answer: 'x' }); }
    const client = openStream(`${baseUrl}/v1/workflows/${workflowId}/events`, { key });
    if (variant === 'abort-live') { await t.begin(); await t.emit('tool_call', 's', 'completed'); }
    await client.received(2);
    console.log('closing client', Date.now()); client.close();
    await sleep(200);
    const count = await new Promise((r) => testApp.app.server.getConnections((_e, c) => r(c)));
    console.log(variant, 'open streams', testApp.app.eventStreams.open.size, sockets.map((s) => [s.destroyed, s.readyState, s.bytesRead, s.bytesWritten, (s as any).connectedAt]));
    const started = Date.now();
    await testApp.app.close();
    console.log(variant, 'connections', count, 'closed in', Date.now() - started, 'conns', client.connections());
    await testApp.close();
  }
}, 300_000);
