import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workflowEventsRepository } from '../../src/store/workflow-events.js';
import { bearer, startTestApp, type TestApp } from '../support/app.js';
import {
  closeTestApp,
  eventually,
  insertWorkflow,
  listen,
  operatorTenant,
  trackerOn,
  within,
} from '../support/event-streams.js';

/**
 * A stream that is still replaying from the store when live token text
 * arrives holds that text until the event it follows is sent, and sends it
 * right after: before the events emitted after the text, which the replay
 * also reads, and before `workflow_end` when the replay reaches it.
 */

let testApp: TestApp;
let baseUrl: string;
let tenantId: string;
let key: string;

/** Events stored before the client connects: the replay takes many pages. */
const HISTORY = 600;

beforeAll(async () => {
  // Small pages: a replay of a long history takes many round trips.
  testApp = await startTestApp({ SSE_MAX_BUFFERED_EVENTS: '4', SSE_HEARTBEAT_MS: '60000' });
  baseUrl = await listen(testApp);
  ({ tenantId, key } = await operatorTenant(testApp));
});

afterAll(async () => {
  if (testApp) await closeTestApp(testApp);
});

/** A workflow with a long stored history, and a client whose replay of it has begun. */
async function replayingStream() {
  const workflowId = await insertWorkflow(testApp, tenantId);
  const tracker = trackerOn(testApp, { tenantId, workflowId });
  await tracker.begin();
  await testApp.services.database.db.transaction().execute((tx) =>
    workflowEventsRepository(tx).append({
      workflowId,
      tenantId,
      events: Array.from({ length: HISTORY }, (_, i) => ({
        type: 'tool_call' as const,
        step: `old-${i}`,
        status: 'completed' as const,
        detail: {},
        elapsedMs: null,
      })),
    }),
  );
  const response = await fetch(`${baseUrl}/v1/workflows/${workflowId}/events`, {
    headers: { ...bearer(key), accept: 'text/event-stream' },
  });
  const stream = { text: '', finished: Promise.resolve() };
  stream.finished = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of response.body ?? []) {
      stream.text += decoder.decode(chunk, { stream: true });
    }
  })();
  await eventually(() => stream.text.includes('id: 2\n'), 5_000, 'the replay began');
  expect(stream.text.includes(`id: ${HISTORY + 1}\n`)).toBe(false);
  return { tracker, stream };
}

/** The stream's frames in order: each event's seq, or 'token'. */
function frameOrder(text: string): (number | 'token')[] {
  return text
    .split('\n\n')
    .filter((block) => block.includes('event: '))
    .map((block) => {
      const id = /^id: (\d+)$/m.exec(block)?.[1];
      return id ? Number(id) : 'token';
    });
}

describe('token text streamed while a stream replays', () => {
  it('arrives right after the last event before it, ahead of the events emitted after it', async () => {
    const { tracker, stream } = await replayingStream();
    tracker.token('LIVE-TEXT');
    await tracker.flushTokens();
    const after = await tracker.emit('llm_call', 'turn-1', 'completed');
    await eventually(() => stream.text.includes(`id: ${after.seq}\n`), 10_000, 'the live event');
    await sleep(300);
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(stream.finished, 10_000, 'the stream ends');

    const order = frameOrder(stream.text);
    const tokenAt = order.indexOf('token');
    expect(tokenAt).toBeGreaterThan(-1);
    expect(order[tokenAt - 1]).toBe(HISTORY + 1);
    expect(order[tokenAt + 1]).toBe(after.seq);
    expect(stream.text).toContain('LIVE-TEXT');
  });

  it('arrives before workflow_end when the workflow ends during the replay', async () => {
    const { tracker, stream } = await replayingStream();
    tracker.token('LAST-TEXT');
    await tracker.flushTokens();
    await tracker.end({ status: 'completed', answer: 'done' });
    await within(stream.finished, 10_000, 'the stream ends');

    const order = frameOrder(stream.text);
    const tokenAt = order.indexOf('token');
    expect(tokenAt).toBeGreaterThan(-1);
    expect(order[tokenAt - 1]).toBe(HISTORY + 1);
    expect(order.at(-1)).toBeGreaterThan(HISTORY + 1);
    expect(stream.text).toContain('LAST-TEXT');
  });
});
