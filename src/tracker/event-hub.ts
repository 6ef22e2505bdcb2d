import pg from 'pg';
import type { Logger } from 'pino';
import type { Db } from '../store/database.js';
import { EVENTS_CHANNEL } from '../store/event-statement-parts.js';
import { workflowEventsRepository } from '../store/workflow-events.js';
import { toEvent } from '../workflows/rows.js';
import type { WorkflowEvent } from '../workflows/types.js';
import { probeListening } from './listen-probe.js';
import {
  MAX_PAYLOAD_BYTES,
  type Notification,
  notificationPayload,
  type PrincipalsNotification,
  parseNotification,
  splitUtf8,
} from './notification.js';

/**
 * Fan-out of workflow events to the subscribers on this replica: events
 * emitted here are delivered in-process; events emitted on other replicas
 * arrive through PostgreSQL LISTEN/NOTIFY on ONE dedicated connection per
 * replica (not one per subscriber). That connection is health-checked and
 * re-established when it drops; a (re)connect counts once it has heard a
 * notification sent through the pool (listen-probe.ts), and then the hub
 * reads from the store whatever its subscribers may have missed. A read
 * that fails (the pool's database briefly out of reach, while the LISTEN
 * connection is not) is tried again, with a bounded backoff, until the
 * events it was to read are delivered: no later notification may come for
 * them (the missed ones may include `workflow_end`). The same connection
 * carries the invalidations of API-key caches (`onPrincipalsChanged`,
 * `onListening`), so a replica needs no second LISTEN connection.
 */

export interface Subscriber {
  onEvent(event: WorkflowEvent): void;
  /**
   * Live token text, which comes right after event `afterSeq`: the last
   * event the hub had delivered before it (a subscriber that has not seen
   * that event yet holds the text until it has).
   */
  onTokens(text: string, afterSeq: number): void;
}

export interface EventHubOptions {
  db: Db;
  /** URL for the LISTEN connection; a direct one when DATABASE_URL goes through a transaction pooler. */
  listenUrl: string;
  /** This replica's id; NOTIFYs it sent itself are skipped (already delivered in-process). */
  origin: string;
  log: Logger;
  healthCheckIntervalMs?: number;
  /** A (re)connect's wait for its probe (listen-probe.ts); LISTEN_PROBE_TIMEOUT_MS unless given. */
  listenProbeTimeoutMs?: number;
  /** A key or tenant changed on another replica (the API-key cache drops what it touched). */
  onPrincipalsChanged?: (change: PrincipalsNotification) => void;
  /**
   * The LISTEN connection came up (true) or went down (false): notifications
   * sent while it was down are lost, so whatever they would invalidate is suspect.
   */
  onListening?: (up: boolean) => void;
  /** Events committed on this replica, as `publish` delivers them (the metrics count them). */
  onPublished?: (committed: readonly WorkflowEvent[]) => void;
}

interface Topic {
  subscribers: Set<Subscriber>;
  /** Highest seq delivered through this hub for the workflow. */
  deliveredSeq: number;
  /** Serialises store reads per workflow so deliveries stay in order. */
  reading: Promise<void>;
  /** A failed read waiting to be tried again, up to the furthest seq a failed read was to reach. */
  retry: { untilSeq: number; timer: NodeJS.Timeout } | undefined;
  /** The wait before the next retry: doubles while reads fail, back to the first after one succeeds. */
  retryDelayMs: number;
}

/** First delay before a failed read is tried again; it doubles up to the maximum while reads keep failing. */
const READ_RETRY_FIRST_MS = 100;
const READ_RETRY_MAX_MS = 5_000;

export function createEventHub(options: EventHubOptions) {
  const log = options.log.child({ component: 'event-hub' });
  const events = workflowEventsRepository(options.db);
  const topics = new Map<string, Topic>();
  let client: pg.Client | undefined;
  let healthy = false;
  let closed = false;
  let reconnectDelayMs = 100;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let healthTimer: NodeJS.Timeout | undefined;

  function deliver(topic: Topic, event: WorkflowEvent): void {
    if (event.seq <= topic.deliveredSeq) return;
    topic.deliveredSeq = event.seq;
    for (const subscriber of topic.subscribers) subscriber.onEvent(event);
  }

  /**
   * Reads the workflow's events after what was delivered, up to `untilSeq`
   * (all of them when not given). A failed read is tried again later.
   */
  function catchUp(workflowId: string, untilSeq = Number.POSITIVE_INFINITY): Promise<void> {
    const topic = topics.get(workflowId);
    if (!topic) return Promise.resolve();
    topic.reading = topic.reading.then(async () => {
      try {
        await readUntil(workflowId, topic, untilSeq);
        topic.retryDelayMs = READ_RETRY_FIRST_MS;
      } catch (error: unknown) {
        retryLater({ workflowId, topic, untilSeq, error });
      }
    });
    return topic.reading;
  }

  async function readUntil(workflowId: string, topic: Topic, untilSeq: number): Promise<void> {
    while (topics.get(workflowId) === topic && topic.deliveredSeq < untilSeq) {
      const rows = await events.listAfter({
        workflowId,
        afterSeq: topic.deliveredSeq,
        limit: 500,
      });
      for (const row of rows) {
        // Later events wait for their turn (token text may come first).
        if (row.seq > untilSeq) return;
        deliver(topic, toEvent(row));
      }
      if (rows.length < 500) break;
    }
  }

  /**
   * Nothing else would read the events a failed read missed: their
   * notifications are spent, and the workflow may emit nothing more. One
   * retry per topic reads up to the furthest seq any failed read was to reach.
   */
  function retryLater(failed: {
    workflowId: string;
    topic: Topic;
    untilSeq: number;
    error: unknown;
  }): void {
    const { workflowId, topic } = failed;
    if (closed || topics.get(workflowId) !== topic) return;
    const untilSeq = Math.max(failed.untilSeq, topic.retry?.untilSeq ?? 0);
    const delayMs = topic.retryDelayMs;
    log.warn(
      { err: failed.error, workflowId, retryInMs: delayMs },
      'reading events for subscribers failed; trying again',
    );
    clearTimeout(topic.retry?.timer);
    const timer = setTimeout(() => {
      topic.retry = undefined;
      void catchUp(workflowId, untilSeq);
    }, delayMs);
    timer.unref();
    topic.retry = { untilSeq, timer };
    topic.retryDelayMs = Math.min(delayMs * 2, READ_RETRY_MAX_MS);
  }

  function dropTopic(workflowId: string, topic: Topic): void {
    clearTimeout(topic.retry?.timer);
    topic.retry = undefined;
    topics.delete(workflowId);
  }

  function deliverTokens(workflowId: string, text: string): void {
    const topic = topics.get(workflowId);
    if (topic) sendTokens(topic, text, topic.deliveredSeq);
  }

  function sendTokens(topic: Topic, text: string, afterSeq: number): void {
    for (const subscriber of topic.subscribers) subscriber.onTokens(text, afterSeq);
  }

  function onNotification(message: pg.Notification): void {
    if (message.channel !== EVENTS_CHANNEL || !message.payload) return;
    const notification = parseNotification(message.payload, options.origin);
    if (notification === null) return;
    if (!notification) {
      log.warn({ payload: message.payload.slice(0, 200) }, 'ignoring a malformed notification');
      return;
    }
    if (notification.kind === 'principals') {
      options.onPrincipalsChanged?.(notification);
      return;
    }
    const topic = topics.get(notification.workflowId);
    if (!topic) return;
    if (notification.kind === 'tokens') {
      deliverTokensInOrder(topic, { workflowId: notification.workflowId, text: notification.text });
      return;
    }
    if (notification.tokens) {
      // The text sits between two of the notified events: the ones up to
      // `afterSeq` first, then the text, then the rest.
      void catchUp(notification.workflowId, notification.tokens.afterSeq);
      deliverTokensInOrder(topic, { workflowId: notification.workflowId, ...notification.tokens });
    }
    void catchUp(notification.workflowId, notification.lastSeq);
  }

  /**
   * Queued behind a store read in progress: the events emitted before
   * these tokens are being read, and the text must not overtake them.
   * `afterSeq`, when the notification said which event the text follows,
   * is passed on even if the read of it failed: subscribers then read the
   * store themselves before they send the text.
   */
  function deliverTokensInOrder(
    topic: Topic,
    tokens: { workflowId: string; text: string; afterSeq?: number },
  ): void {
    const { workflowId, text } = tokens;
    topic.reading = topic.reading
      .then(() => sendTokens(topic, text, Math.max(topic.deliveredSeq, tokens.afterSeq ?? 0)))
      .catch((error: unknown) => log.error({ err: error, workflowId }, 'delivering tokens failed'));
  }

  async function connect(): Promise<void> {
    const next = new pg.Client({ connectionString: options.listenUrl, keepAlive: true });
    next.on('notification', onNotification);
    next.on('error', (error) => dropConnection(next, error));
    next.on('end', () => dropConnection(next, new Error('the listening connection ended')));
    try {
      await next.connect();
      // Before the channel, so a connection that cannot hear the pool never counts as listening.
      await probeListening({
        listener: next,
        db: options.db,
        timeoutMs: options.listenProbeTimeoutMs,
      });
      await next.query(`LISTEN ${EVENTS_CHANNEL}`);
    } catch (error) {
      // A connection that is up but could not LISTEN (a standby, say) would stay open.
      await next.end().catch(() => undefined);
      throw error;
    }
    // Closed while connecting: the connection is not kept, and nothing reconnects.
    if (closed) {
      await next.end().catch(() => undefined);
      return;
    }
    client = next;
    healthy = true;
    options.onListening?.(true);
    reconnectDelayMs = 100;
    log.info('listening for workflow events');
    // Whatever was emitted while we were not listening is in the store.
    await Promise.all([...topics.keys()].map((workflowId) => catchUp(workflowId)));
  }

  function dropConnection(dropped: pg.Client, error: unknown): void {
    if (client !== dropped) return;
    client = undefined;
    healthy = false;
    options.onListening?.(false);
    dropped.removeAllListeners('notification');
    void dropped.end().catch(() => undefined);
    if (closed) return;
    log.warn(
      { err: error, retryInMs: reconnectDelayMs },
      'lost the listening connection; reconnecting',
    );
    scheduleReconnect();
  }

  function scheduleReconnect(): void {
    clearTimeout(reconnectTimer);
    reconnectTimer = setTimeout(() => {
      connect().catch((error: unknown) => {
        if (closed) return;
        log.warn({ err: error }, 'reconnecting the listening connection failed');
        reconnectDelayMs = Math.min(reconnectDelayMs * 2, 5_000);
        scheduleReconnect();
      });
    }, reconnectDelayMs);
  }

  /** A silently dead TCP connection would never emit 'error'; a periodic query finds it. */
  function startHealthChecks(): void {
    const interval = options.healthCheckIntervalMs ?? 10_000;
    healthTimer = setInterval(() => {
      const current = client;
      if (!current) return;
      const timeout = setTimeout(
        () => dropConnection(current, new Error('health check timed out')),
        interval,
      );
      current
        .query('SELECT 1')
        .then(() => clearTimeout(timeout))
        .catch((error: unknown) => {
          clearTimeout(timeout);
          dropConnection(current, error);
        });
    }, interval);
    healthTimer.unref();
  }

  return {
    async start(): Promise<void> {
      await connect();
      startHealthChecks();
    },

    /** Whether the LISTEN connection is up (for readiness and tests). */
    isListening: (): boolean => healthy,

    /**
     * Subscribes to a workflow's live events. Subscribe first, then replay
     * from the store: live events that overlap the replay are de-duplicated
     * by seq by the subscriber. `afterSeq` sets where a new topic starts.
     */
    subscribe(workflowId: string, subscriber: Subscriber, afterSeq = 0): () => void {
      let topic = topics.get(workflowId);
      if (!topic) {
        topic = {
          subscribers: new Set(),
          deliveredSeq: afterSeq,
          reading: Promise.resolve(),
          retry: undefined,
          retryDelayMs: READ_RETRY_FIRST_MS,
        };
        topics.set(workflowId, topic);
      }
      topic.subscribers.add(subscriber);
      return () => {
        const current = topics.get(workflowId);
        if (!current) return;
        current.subscribers.delete(subscriber);
        if (current.subscribers.size === 0) dropTopic(workflowId, current);
      };
    },

    /** Delivers events committed on this replica to its subscribers (the NOTIFY echo is skipped). */
    publish(committed: WorkflowEvent[]): void {
      options.onPublished?.(committed);
      for (const event of committed) {
        const topic = topics.get(event.workflowId);
        if (topic) deliver(topic, event);
      }
    },

    /** Token chunks to this replica's subscribers only (other replicas get them in a NOTIFY of events). */
    deliverTokens,

    /** Token chunks: to local subscribers now, to other replicas by NOTIFY. */
    async publishTokens(workflowId: string, text: string): Promise<void> {
      deliverTokens(workflowId, text);
      // JSON escaping can grow a character to six bytes (\u0000): 1,000-byte
      // pieces stay under the payload limit whatever the text.
      for (const piece of splitUtf8(text, Math.floor(MAX_PAYLOAD_BYTES / 7))) {
        await events.notify(
          notificationPayload({ kind: 'tokens', workflowId, text: piece, origin: options.origin }),
        );
      }
    },

    /** Reads the store for a workflow's subscribers (after a gap is suspected). */
    catchUp,

    /** Subscribers of a workflow on this replica (tests check that closed streams let go). */
    subscriberCount: (workflowId: string): number => topics.get(workflowId)?.subscribers.size ?? 0,

    /** Test hook: the listening connection's backend pid. */
    listenerPid: (): number | undefined =>
      (client as (pg.Client & { processID?: number }) | undefined)?.processID,

    async close(): Promise<void> {
      closed = true;
      clearTimeout(reconnectTimer);
      clearInterval(healthTimer);
      const current = client;
      client = undefined;
      healthy = false;
      options.onListening?.(false);
      await current?.end().catch(() => undefined);
      for (const [workflowId, topic] of topics) dropTopic(workflowId, topic);
    },
  };
}

export type EventHub = ReturnType<typeof createEventHub>;

export type { Notification };
