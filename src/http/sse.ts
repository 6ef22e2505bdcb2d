import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { badRequest } from '../errors.js';
import type { Workflow } from '../workflows/types.js';
import { isFinished } from '../workflows/types.js';
import { tenantIdOf } from './auth.js';
import { type EventStreams, type OpenStream, openEventStream } from './event-stream.js';
import { STREAM_HEADERS } from './sse-frames.js';

/**
 * Server-sent events: the stream behind `GET /v1/workflows/:id/events` and
 * `POST /v1/workflows` with `Accept: text/event-stream`. Frames are made by
 * sse-frames.ts; one client's stream (ordering, backlog, heartbeats) is
 * event-stream.ts.
 *
 * Written on the raw response rather than through @fastify/sse: its
 * `send()` awaits 'drain' without a bound or a timeout and shows no
 * backlog, its heartbeat writes whether or not the socket is full, and
 * `reply.sse` exists only on routes declared `sse`, while this stream also
 * serves the create route. What it would add (four headers and the frame
 * format) is a few lines of sse-frames.ts.
 */

declare module 'fastify' {
  interface FastifyInstance {
    /** Set by the `eventStreams` plugin; used by `streamWorkflowEvents`. */
    eventStreams: EventStreams;
  }
}

/**
 * Holds what event streams need and the set of open ones, so that closing
 * the app (SIGTERM) ends them with a `retry:` hint before the server waits
 * for its connections: their clients resume elsewhere with Last-Event-ID.
 */
export const eventStreams = fp(
  async (
    app: FastifyInstance,
    options: Pick<EventStreams, 'hub' | 'db' | 'workflows' | 'config' | 'metrics'>,
  ) => {
    const open = new Set<OpenStream>();
    const streams: EventStreams = { ...options, open, closing: false, frames: new WeakMap() };
    app.decorate('eventStreams', streams);
    app.addHook('preClose', async () => {
      streams.closing = true;
      await Promise.all([...open].map((stream) => stream.shutdown()));
    });
  },
  { name: 'waymark-event-streams' },
);

/**
 * Streams a workflow's events after `afterSeq` and ends after
 * `workflow_end`. 404 for an unknown workflow or another tenant's; 204 when
 * the workflow is finished and the client already has its last event (an
 * EventSource stops reconnecting on 204); 400 `unknown_event_id` for a
 * position past the workflow's last event, which no client was sent (the
 * stream would skip every event up to it: for a running workflow, its end
 * too, and stay open for good); a HEAD request gets the head a GET would,
 * and no stream. Resolves when the stream is over.
 */
export async function streamWorkflowEvents(
  request: FastifyRequest,
  reply: FastifyReply,
  options: {
    workflowId: string;
    afterSeq: number;
    /** Where `afterSeq` came from, for the 400 that refuses it (`headers.last-event-id`, `query.after`). */
    afterSeqField?: string;
    /**
     * The workflow as the caller just read or created it. Given, the stream
     * subscribes without a database round trip first: a create that streams
     * is subscribed before its run can emit (the run writes and publishes
     * nothing before the insert has answered, and at least a turn of the
     * event loop after), so not even the first token chunk is missed.
     */
    workflow?: Workflow;
    /**
     * The workflow was created by this request (not an idempotent replay):
     * nothing of it is stored yet, so the stream skips its first read.
     */
    justCreated?: boolean;
  },
): Promise<void> {
  const streams = request.server.eventStreams;
  if (!streams) throw new Error('register the eventStreams plugin before streaming events');
  const tenantId = tenantIdOf(request);
  const workflow = options.workflow ?? (await streams.workflows.get(tenantId, options.workflowId));
  if (options.afterSeq > workflow.lastSeq) {
    throw badRequest(
      'unknown_event_id',
      `There is no event ${options.afterSeq}: the workflow's last event is ${workflow.lastSeq}`,
      [{ field: options.afterSeqField ?? 'afterSeq', message: `at most ${workflow.lastSeq}` }],
    );
  }
  if (isFinished(workflow.status) && options.afterSeq === workflow.lastSeq) {
    // Awaited to its end, as a route returns its reply: an onSend hook may
    // finish the answer later (app.ts), and Fastify sends a 204 again for
    // an async handler that resolves while its reply is not yet sent.
    await reply.code(204).send();
    return;
  }
  // Gone while we looked the workflow up: its 'close' has fired already.
  if (!reply.raw.socket || reply.raw.socket.destroyed) return;
  // Headers set on the reply so far (X-Request-Id) go out with the stream's own.
  for (const [name, value] of Object.entries({ ...reply.getHeaders(), ...STREAM_HEADERS })) {
    if (value !== undefined) reply.raw.setHeader(name, value);
  }
  reply.raw.removeHeader('content-encoding');
  reply.raw.removeHeader('content-length');
  reply.raw.writeHead(200);
  if (request.method === 'HEAD') {
    // The route's automatic HEAD gets the stream's head, at once: its
    // response has no body, so Node would drop every frame and send even
    // the head only at the end, which a stream may never reach.
    reply.raw.end();
    return;
  }
  const stream = openEventStream({
    streams,
    raw: reply.raw,
    log: request.log,
    tenantId,
    workflowId: options.workflowId,
    afterSeq: options.afterSeq,
    lastSeqAtOpen: workflow.lastSeq,
    nothingStored: options.justCreated === true && options.workflow !== undefined,
  });
  streams.open.add(stream);
  const streamEnded = streams.metrics.streamOpened();
  // Begun before the app started closing (a create whose insert was slow),
  // opened after: without this it stayed open until the grace ran out.
  if (streams.closing) void stream.shutdown();
  try {
    await stream.done;
  } finally {
    streams.open.delete(stream);
    streamEnded();
  }
}
