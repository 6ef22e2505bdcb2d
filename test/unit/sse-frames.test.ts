import { describe, expect, it } from 'vitest';
import { serializeFrame } from '../../src/http/sse-frames.js';
import { redactUrl } from '../../src/logger.js';
import type { WorkflowEvent } from '../../src/workflows/types.js';

const event: WorkflowEvent = {
  seq: 7,
  workflowId: '7b0c3c1e-1a52-4bd4-9df5-6a4f6d7c2b10',
  type: 'tool_call',
  step: 'search',
  status: 'completed',
  detail: { text: 'two\nlines\r\nand a \u2028 separator' },
  ts: '2026-11-30T12:00:00.000Z',
  elapsedMs: 12,
};

describe('serializeFrame', () => {
  it('a persisted event: id is its seq, event its type, data the event as one line of JSON', () => {
    const frame = serializeFrame({ kind: 'event', event });
    expect(frame).toBe(`id: 7\nevent: tool_call\ndata: ${JSON.stringify(event)}\n\n`);
    expect(frame.slice(0, -2).split('\n')).toHaveLength(3);
  });

  it('a token chunk: event token, no id (Last-Event-ID keeps naming a stored event), the event shape with seq 0', () => {
    const frame = serializeFrame({ kind: 'tokens', workflowId: event.workflowId, text: 'Hel\nlo' });
    expect(frame).not.toMatch(/^id:/m);
    const [eventLine, dataLine, ...rest] = frame.split('\n');
    expect(eventLine).toBe('event: token');
    expect(rest).toEqual(['', '']);
    expect(JSON.parse(dataLine?.slice('data: '.length) ?? '')).toMatchObject({
      seq: 0,
      workflowId: event.workflowId,
      type: 'token',
      step: null,
      status: 'streaming',
      detail: { text: 'Hel\nlo' },
    });
  });

  it('comments and retry hints', () => {
    expect(serializeFrame({ kind: 'comment', text: 'heartbeat' })).toBe(': heartbeat\n\n');
    expect(serializeFrame({ kind: 'comment', text: 'a\nb' })).toBe(': a b\n\n');
    expect(serializeFrame({ kind: 'retry', ms: 2000 })).toBe('retry: 2000\n\n');
  });
});

describe('redactUrl', () => {
  it('replaces the values of token query parameters, wherever they are', () => {
    expect(redactUrl('/v1/workflows/x/events?token=abc.def')).toBe(
      '/v1/workflows/x/events?token=[redacted]',
    );
    expect(redactUrl('/e?after=3&token=abc&x=1&TOKEN=zz')).toBe(
      '/e?after=3&token=[redacted]&x=1&TOKEN=[redacted]',
    );
    expect(redactUrl('/e?mytoken=keep')).toBe('/e?mytoken=keep');
    expect(redactUrl('/e?tok%65n=abc&%74oken=def&tok%zz=keep')).toBe(
      '/e?tok%65n=[redacted]&%74oken=[redacted]&tok%zz=keep',
    );
    expect(redactUrl('/v1/tenants')).toBe('/v1/tenants');
  });
});
