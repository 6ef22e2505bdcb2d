import type { WorkflowEvent } from '../workflows/types.js';

/**
 * The SSE wire format of Waymark: the one serializer from WorkflowTracker
 * events, token chunks, comments and retry hints to SSE frames, and the
 * headers of every event stream. No other code writes `event:` or `data:`.
 */

/** Everything a stream writes; `serializeFrame` is the only place SSE text is made. */
export type Frame =
  | { kind: 'event'; event: WorkflowEvent }
  | { kind: 'tokens'; workflowId: string; text: string }
  | { kind: 'comment'; text: string }
  | { kind: 'retry'; ms: number };

/**
 * Persisted events carry `id: <seq>`, so an EventSource's Last-Event-ID
 * always names one. Token chunks carry no id (they are not stored and
 * cannot be replayed) and have the event shape with `seq` 0.
 * JSON.stringify never emits a raw line break, so `data:` is one line.
 */
export function serializeFrame(frame: Frame): string {
  switch (frame.kind) {
    case 'event':
      return `id: ${frame.event.seq}\nevent: ${frame.event.type}\ndata: ${JSON.stringify(frame.event)}\n\n`;
    case 'tokens':
      return `event: token\ndata: ${JSON.stringify(tokenChunkEvent(frame.workflowId, frame.text))}\n\n`;
    case 'comment':
      return `: ${frame.text.replace(/[\r\n]+/g, ' ')}\n\n`;
    case 'retry':
      return `retry: ${frame.ms}\n\n`;
  }
}

function tokenChunkEvent(workflowId: string, text: string): WorkflowEvent {
  return {
    seq: 0,
    workflowId,
    type: 'token',
    step: null,
    status: 'streaming',
    detail: { text },
    ts: new Date().toISOString(),
  };
}

/**
 * `no-transform` keeps proxies from compressing or rebuffering the stream;
 * `X-Accel-Buffering: no` does the same for nginx. No Content-Encoding is
 * ever set: a compressor would hold frames back until its block fills.
 */
export const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
};
