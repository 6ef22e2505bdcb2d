import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.js';
import type { WaymarkMetrics } from '../metrics/waymark-metrics.js';
import type { Db } from '../store/database.js';
import { workflowEventsRepository } from '../store/workflow-events.js';
import type { EventHub } from '../tracker/event-hub.js';
import { toEvent } from '../workflows/rows.js';
import type { WorkflowService } from '../workflows/service.js';
import type { WorkflowEvent } from '../workflows/types.js';
import { type Frame, serializeFrame } from './sse-frames.js';

/** Rows per replay read; the next page is read once the previous one is written. */
const REPLAY_PAGE = 500;
/** Token text held until the event it follows is queued; beyond it the oldest is dropped (the `answer` event has the whole text). */
const MAX_HELD_TOKEN_CHARS = 64 * 1024;
/** How long a stream ended by shutdown may take to flush before its socket is destroyed. */
const SHUTDOWN_FLUSH_MS = 1000;

export interface OpenStream {
  shutdown(): Promise<void>;
}

/** What every stream of an app shares (see the `eventStreams` plugin in sse.ts). */
export interface EventStreams {
  hub: EventHub;
  db: Db;
  workflows: Pick<WorkflowService, 'get'>;
  config: Pick<Config, 'SSE_HEARTBEAT_MS' | 'SSE_RETRY_MS' | 'SSE_MAX_BUFFERED_EVENTS'>;
  open: Set<OpenStream>;
  /** Counts the streams opened and open (`GET /metrics`). */
  metrics: Pick<WaymarkMetrics, 'streamOpened'>;
  /** The app is closing: a stream that opens now ends at once, as the open ones did. */
  closing: boolean;
  /** One serialization per event however many local streams it goes to (the hub hands them the same object). */
  frames: WeakMap<WorkflowEvent, string>;
}

type CloseReason =
  | 'completed'
  | 'client_gone'
  | 'slow_consumer'
  | 'stalled'
  | 'store_error'
  | 'deleted'
  | 'shutdown';

export interface StreamOptions {
  streams: EventStreams;
  raw: ServerResponse;
  /**
   * The request's: each line names the workflow itself, where a child
   * logger per stream would serialize its bindings for lines that are
   * mostly at debug.
   */
  log: FastifyBaseLogger;
  tenantId: string;
  workflowId: string;
  afterSeq: number;
  lastSeqAtOpen: number;
  /**
   * The store holds no event after `afterSeq` that the hub will not
   * deliver: the workflow was just created by this request and the stream
   * subscribes before its run can emit. The first read is skipped.
   */
  nothingStored?: boolean;
}

/**
 * One client's stream. It subscribes to the hub first, then replays from
 * the store, so nothing committed in between is missed. Frames enter the
 * outbox strictly in seq order: a live event is taken directly only when
 * it is the next seq; anything else is a gap, filled by reading the store
 * (every event reaches the hub after its commit, and seqs commit in
 * order), and anything at or below the last queued seq is a duplicate.
 * Live events are thus never buffered: the store holds them. Live token
 * text, which the store does not hold, is held until the event it follows
 * is queued, and goes right after it: before the events emitted after it,
 * however far behind the stream is.
 *
 * The outbox is written while the socket accepts; a client whose outbox
 * passes SSE_MAX_BUFFERED_EVENTS, or whose socket takes no data for a whole
 * heartbeat interval, is dropped and resumes with Last-Event-ID. Replay
 * reads the next page only once the outbox is empty, so a long history
 * never piles up in memory either.
 */
export function openEventStream(options: StreamOptions): OpenStream & { done: Promise<void> } {
  const { raw, log, streams, workflowId } = options;
  const { SSE_HEARTBEAT_MS, SSE_RETRY_MS, SSE_MAX_BUFFERED_EVENTS } = streams.config;
  const events = workflowEventsRepository(streams.db);
  const socket = raw.socket;
  const outbox: Frame[] = [];
  /** Highest seq put in the outbox (sent or waiting). */
  let queuedSeq = options.afterSeq;
  /** Highest seq known to exist (stored when the stream opened, or announced live); the store is read up to it. */
  let wantedSeq = Math.max(options.afterSeq, options.lastSeqAtOpen);
  let sentSeq = options.afterSeq;
  let reading = false;
  const heldTokens = createHeldTokens();
  let ending = false;
  let closed = false;
  let stalledAtLastTick = false;
  let outboxEmptied: (() => void) | undefined;
  let unsubscribe: () => void = () => undefined;
  let heartbeat: NodeJS.Timeout | undefined;
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  const responseClosed = new Promise<void>((resolve) => raw.once('close', () => resolve()));

  function serialize(frame: Frame): string {
    if (frame.kind !== 'event') return serializeFrame(frame);
    let text = streams.frames.get(frame.event);
    if (text === undefined) {
      text = serializeFrame(frame);
      streams.frames.set(frame.event, text);
    }
    return text;
  }

  function onEvent(event: WorkflowEvent): void {
    if (closed || ending || event.seq <= queuedSeq) return;
    if (event.seq === queuedSeq + 1) {
      enqueueEvent(event);
      return;
    }
    wantedSeq = Math.max(wantedSeq, event.seq);
    readStore();
  }

  function onTokens(text: string, afterSeq: number): void {
    if (closed || ending) return;
    if (afterSeq <= queuedSeq && heldTokens.isEmpty()) {
      enqueue({ kind: 'tokens', workflowId, text });
      return;
    }
    // The events it follows are not queued yet: it would overtake them.
    heldTokens.hold(text, afterSeq);
    wantedSeq = Math.max(wantedSeq, afterSeq);
    readStore();
  }

  /** An event, then the token text that follows it. */
  function enqueueEvent(event: WorkflowEvent): void {
    enqueue({ kind: 'event', event });
    releaseHeldTokens(queuedSeq);
  }

  /** Sends the held text that follows events up to `upToSeq` (all of it when not given). */
  function releaseHeldTokens(upToSeq = Number.POSITIVE_INFINITY): void {
    const text = heldTokens.take(upToSeq);
    if (text && !closed && !ending) enqueue({ kind: 'tokens', workflowId, text });
  }

  function enqueue(frame: Frame): void {
    if (frame.kind === 'event') {
      queuedSeq = frame.event.seq;
      if (frame.event.type === 'workflow_end') ending = true;
    }
    const last = outbox.at(-1);
    if (frame.kind === 'tokens' && last?.kind === 'tokens') last.text += frame.text;
    else outbox.push(frame);
    if (outbox.length > SSE_MAX_BUFFERED_EVENTS) {
      close('slow_consumer');
      return;
    }
    flush();
  }

  function flush(): void {
    while (!closed && outbox.length > 0 && !raw.writableNeedDrain) {
      const frame = outbox.shift() as Frame;
      raw.write(serialize(frame));
      if (frame.kind === 'event') sentSeq = frame.event.seq;
    }
    if (closed || outbox.length > 0) return;
    const wake = outboxEmptied;
    outboxEmptied = undefined;
    wake?.();
    if (ending) close('completed');
  }

  function whenOutboxEmpty(): Promise<void> {
    if (outbox.length === 0 || closed) return Promise.resolve();
    return new Promise((resolve) => {
      outboxEmptied = resolve;
    });
  }

  function readStore(): void {
    if (reading || closed) return;
    reading = true;
    readUntilCaughtUp().then(
      () => {
        reading = false;
        releaseHeldTokens();
      },
      (error: unknown) => {
        reading = false;
        if (closed) return; // the pool closing under a stream that has ended anyway
        log.error({ err: error, workflowId }, 'reading workflow events for a stream failed');
        close('store_error');
      },
    );
  }

  async function readUntilCaughtUp(): Promise<void> {
    // At most half the bound, leaving the other half to live events arriving meanwhile.
    const pageSize = Math.max(1, Math.min(REPLAY_PAGE, Math.floor(SSE_MAX_BUFFERED_EVENTS / 2)));
    for (;;) {
      await whenOutboxEmpty();
      if (closed || ending) return;
      const rows = await events.listAfter({
        workflowId,
        tenantId: options.tenantId,
        afterSeq: queuedSeq,
        limit: pageSize,
      });
      for (const row of rows) {
        if (closed || ending) return;
        if (row.seq > queuedSeq) enqueueEvent(toEvent(row));
      }
      if (closed || ending) return;
      if (rows.length === pageSize) continue;
      if (queuedSeq >= wantedSeq) return;
      if (rows.length === 0) {
        // Known to exist but absent: events are deleted only with their
        // workflow (migration 0011's trigger), which the retention sweep
        // deletes only once finished, so nothing will be emitted for it
        // again. Waiting would hold the stream open for good; ended, its
        // client reconnects and gets 404.
        log.info(
          { workflowId, queuedSeq, wantedSeq },
          'the workflow was deleted while its stream was open',
        );
        close('deleted');
        return;
      }
    }
  }

  function onHeartbeat(): void {
    if (raw.writableNeedDrain) {
      if (stalledAtLastTick) close('stalled');
      stalledAtLastTick = true;
      return;
    }
    stalledAtLastTick = false;
    if (outbox.length === 0) raw.write(serializeFrame({ kind: 'comment', text: 'heartbeat' }));
  }

  function onDrain(): void {
    stalledAtLastTick = false;
    flush();
  }

  function onError(error: Error): void {
    log.debug({ err: error, workflowId }, 'event stream socket error');
    close('client_gone');
  }

  /** Ends the response; a client that does not take the rest within `graceMs` is cut off. */
  function endResponse(graceMs: number, last?: string): void {
    raw.end(last);
    const guard = setTimeout(() => raw.destroy(), graceMs);
    guard.unref();
    void responseClosed.then(() => clearTimeout(guard));
  }

  function close(reason: CloseReason): void {
    if (closed) return;
    closed = true;
    unsubscribe();
    clearInterval(heartbeat);
    raw.off('drain', onDrain);
    const pending = outbox.length;
    outbox.length = 0;
    heldTokens.clear();
    outboxEmptied?.();
    outboxEmptied = undefined;
    const fields = { workflowId, reason, sentSeq, pending };
    switch (reason) {
      case 'completed':
        endResponse(SSE_HEARTBEAT_MS);
        log.debug(fields, 'event stream completed');
        break;
      case 'store_error':
      case 'deleted':
        endResponse(SSE_HEARTBEAT_MS);
        break;
      case 'shutdown':
        // The connection is closed too, so the client's reconnect opens a
        // new one to a replica that is still serving.
        if (raw.writableNeedDrain) raw.destroy();
        else endResponse(SHUTDOWN_FLUSH_MS, serializeFrame({ kind: 'retry', ms: SSE_RETRY_MS }));
        raw.once('finish', () => socket?.end());
        log.debug(fields, 'event stream closed for shutdown');
        break;
      case 'slow_consumer':
      case 'stalled':
        raw.destroy();
        log.warn(fields, 'dropped an event stream client that does not keep up');
        break;
      case 'client_gone':
        log.debug(fields, 'event stream client went away');
        break;
    }
    resolveDone();
  }

  unsubscribe = streams.hub.subscribe(
    workflowId,
    { onEvent, onTokens },
    // A new hub topic starts where this stream's replay will have read to.
    Math.max(options.afterSeq, options.lastSeqAtOpen),
  );
  raw.write(serializeFrame({ kind: 'retry', ms: SSE_RETRY_MS }));
  raw.on('drain', onDrain);
  raw.on('error', onError);
  void responseClosed.then(() => close('client_gone'));
  heartbeat = setInterval(onHeartbeat, SSE_HEARTBEAT_MS);
  heartbeat.unref();
  log.debug({ workflowId, afterSeq: options.afterSeq }, 'event stream opened');
  if (!options.nothingStored) readStore();

  return {
    done,
    shutdown() {
      close('shutdown');
      return responseClosed;
    },
  };
}

/**
 * Token text waiting for the event it follows, in arrival order (so in
 * `afterSeq` order, which the hub's deliveries never lower). Bounded by
 * MAX_HELD_TOKEN_CHARS: past it the oldest text is dropped.
 */
function createHeldTokens() {
  const held: { text: string; afterSeq: number }[] = [];
  let chars = 0;

  function dropOldest(): void {
    for (let first = held[0]; first && chars > MAX_HELD_TOKEN_CHARS; first = held[0]) {
      const excess = chars - MAX_HELD_TOKEN_CHARS;
      if (first.text.length > excess) {
        first.text = first.text.slice(excess);
        chars -= excess;
      } else {
        held.shift();
        chars -= first.text.length;
      }
    }
  }

  return {
    isEmpty: (): boolean => held.length === 0,

    hold(text: string, afterSeq: number): void {
      const last = held.at(-1);
      if (last && last.afterSeq >= afterSeq) last.text += text;
      else held.push({ text, afterSeq });
      chars += text.length;
      dropOldest();
    },

    /** Removes and returns the text that follows events up to `upToSeq`. */
    take(upToSeq: number): string {
      let text = '';
      for (let first = held[0]; first && first.afterSeq <= upToSeq; first = held[0]) {
        held.shift();
        text += first.text;
        chars -= first.text.length;
      }
      return text;
    },

    clear(): void {
      held.length = 0;
      chars = 0;
    },
  };
}
