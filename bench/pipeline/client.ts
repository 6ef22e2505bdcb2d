import http from 'node:http';
import { performance } from 'node:perf_hooks';

/**
 * The client side of bench/pipeline, over real HTTP: a workflow is started
 * with `POST /v1/workflows` and `Accept: text/event-stream`, whose response
 * is its event stream (it stays open across the checkpoint's pause and ends
 * after `workflow_end`); `continue` is a separate POST on a keep-alive
 * socket. Each event is stamped with `performance.now()` when the chunk
 * holding the end of its frame was read.
 */

export interface ServiceTarget {
  /** e.g. `http://127.0.0.1:8080` */
  baseUrl: string;
  apiKey: string;
  model: string;
  agent: http.Agent;
}

/** What the bench reads of an event (the SSE `data:` is the whole WorkflowEvent). */
export interface StreamedEvent {
  seq: number;
  workflowId: string;
  type: string;
  step: string | null;
  status: string;
  detail: Record<string, unknown>;
}

export interface ArrivedEvent {
  event: StreamedEvent;
  /** `performance.now()` when its frame was complete. */
  at: number;
}

export interface WorkflowStream {
  /**
   * The first event, seen or still to come, that `matches`; rejects when the
   * stream ends without one (a failed workflow says so) or after `timeoutMs`.
   */
  waitFor(matches: (event: StreamedEvent) => boolean, timeoutMs?: number): Promise<ArrivedEvent>;
  /** Resolves once the stream ended after `workflow_end`. */
  ended: Promise<void>;
  /** Closes the socket early (after a failure). */
  destroy(): void;
}

interface Waiter {
  matches: (event: StreamedEvent) => boolean;
  resolve: (arrived: ArrivedEvent) => void;
  reject: (error: Error) => void;
}

const DEFAULT_WAIT_MS = 60_000;

/** Starts a workflow and reads its stream; `body` is the create request. */
export function startStreamedWorkflow(
  target: ServiceTarget,
  body: Record<string, unknown>,
): WorkflowStream {
  const payload = JSON.stringify(body);
  const seen: ArrivedEvent[] = [];
  let waiters: Waiter[] = [];
  let failure: Error | undefined;
  let resolveEnded: () => void = () => undefined;
  let rejectEnded: (error: Error) => void = () => undefined;
  const ended = new Promise<void>((resolve, reject) => {
    resolveEnded = resolve;
    rejectEnded = reject;
  });
  // Observed by the waiters; an unobserved rejection would end the process.
  ended.catch(() => undefined);

  const fail = (error: Error) => {
    if (failure) return;
    failure = error;
    for (const waiter of waiters) waiter.reject(error);
    waiters = [];
    rejectEnded(error);
  };

  const onEvent = (arrived: ArrivedEvent) => {
    seen.push(arrived);
    const still: Waiter[] = [];
    for (const waiter of waiters) {
      if (waiter.matches(arrived.event)) waiter.resolve(arrived);
      else still.push(waiter);
    }
    waiters = still;
    const { event } = arrived;
    if (event.type === 'workflow_end' && event.status !== 'completed') {
      fail(
        new Error(`workflow ${event.workflowId} ended ${event.status}: ${JSON.stringify(event)}`),
      );
    }
  };

  const request = http.request(
    new URL('/v1/workflows', target.baseUrl),
    {
      method: 'POST',
      agent: target.agent,
      headers: {
        authorization: `Bearer ${target.apiKey}`,
        accept: 'text/event-stream',
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
      },
    },
    (response) => {
      response.setEncoding('utf8');
      let buffer = '';
      response.on('data', (chunk: string) => {
        buffer += chunk;
        if (response.statusCode !== 200) return;
        const at = performance.now();
        const last = buffer.lastIndexOf('\n\n');
        if (last === -1) return;
        for (const frame of buffer.slice(0, last).split('\n\n')) {
          const event = parseEventFrame(frame);
          if (event) onEvent({ event, at });
        }
        buffer = buffer.slice(last + 2);
      });
      response.once('end', () => {
        if (response.statusCode !== 200) {
          fail(new Error(`POST /v1/workflows answered ${response.statusCode}: ${buffer}`));
        } else if (seen.at(-1)?.event.type === 'workflow_end') {
          const error = new Error('the stream ended before the event waited for');
          for (const waiter of waiters) waiter.reject(error);
          waiters = [];
          resolveEnded();
        } else {
          fail(new Error('the event stream ended without workflow_end'));
        }
      });
      response.once('error', fail);
    },
  );
  request.once('error', fail);
  request.end(payload);

  return {
    waitFor(matches, timeoutMs = DEFAULT_WAIT_MS) {
      const already = seen.find((arrived) => matches(arrived.event));
      if (already) return Promise.resolve(already);
      if (failure) return Promise.reject(failure);
      return new Promise<ArrivedEvent>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters = waiters.filter((waiter) => waiter !== entry);
          reject(new Error(`no matching event within ${timeoutMs} ms`));
        }, timeoutMs);
        const entry: Waiter = {
          matches,
          resolve: (arrived) => {
            clearTimeout(timer);
            resolve(arrived);
          },
          reject: (error) => {
            clearTimeout(timer);
            reject(error);
          },
        };
        waiters.push(entry);
      });
    },
    ended,
    destroy: () => request.destroy(),
  };
}

/**
 * A persisted event's frame (`id:`, `event:`, `data:`); undefined for token
 * chunks, heartbeat comments and retry hints. The chunked transfer
 * encoding is undone by Node's HTTP client, so frames are plain SSE text.
 */
function parseEventFrame(frame: string): StreamedEvent | undefined {
  if (!frame.startsWith('id: ')) return undefined;
  const data = /\ndata: (.*)/.exec(frame)?.[1];
  return data === undefined ? undefined : (JSON.parse(data) as StreamedEvent);
}

/**
 * `POST /v1/workflows/:id/<action>` with an empty body; resolves with the
 * time the 202 arrived, rejects on any other status.
 */
export function postAction(
  target: ServiceTarget,
  workflowId: string,
  action: string,
): Promise<number> {
  const payload = '{}';
  return new Promise((resolve, reject) => {
    const request = http.request(
      new URL(`/v1/workflows/${workflowId}/${action}`, target.baseUrl),
      {
        method: 'POST',
        agent: target.agent,
        headers: {
          authorization: `Bearer ${target.apiKey}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
        },
      },
      (response) => {
        const at = performance.now();
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.once('end', () => {
          if (response.statusCode === 202) resolve(at);
          else reject(new Error(`POST ${action} answered ${response.statusCode}: ${text}`));
        });
        response.once('error', reject);
      },
    );
    request.once('error', reject);
    request.end(payload);
  });
}
