import type pg from 'pg';
import type { Logger } from 'pino';
import type { Db } from '../store/database.js';
import { EVENTS_CHANNEL } from '../store/event-statement-parts.js';
import { workflowEventsRepository } from '../store/workflow-events.js';
import { toEvent } from '../workflows/rows.js';
import type { WorkflowEvent } from '../workflows/types.js';
import { createListenConnection } from './listen-connection.js';
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
 * replica, not one per subscriber (listen-connection.ts: health-checked,
 * re-established when it drops, counted once it hears the pool, and
 * LISTENing only while another client, maybe a replica, is connected).
 * Whenever it may have missed notifications (a (re)connect, another
 * client come), the hub reads from the store whatever its subscribers may
 * lack. A read that fails (the pool's database briefly out of reach,
 * while the LISTEN connection is not) is tried again, with a bounded
 * backoff, until the events it was to read are delivered: no later
 * notification may come for them (the missed ones may include
 * `workflow_end`). The same connection carries the invalidations of
 * API-key caches (`onPrincipalsChanged`, `onListening`), so a replica
 * needs no second LISTEN connection.
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
  /** How often it looks for other replicas to listen to (listen-connection.ts); 1 s unless given. */
  presenceIntervalMs?: number;
  /** How long it goes on listening once it finds none (listen-connection.ts); 60 s unless given. */
  listenLingerMs?: number;
  /**
   * The `application_name` of this replica's connections (its pool's and the
   * LISTEN connection's). Every other client connected to the database may
   * be another replica, to listen to; unset, every client but the LISTEN
   * connection is.
   */
  applicationName?: string;
  /** A key or tenant changed on another replica (the API-key cache drops what it touched). */
  onPrincipalsChanged?: (change: PrincipalsNotification) => void;
  /**
   * The replica hears every other one from now on (true: its LISTEN
   * connection came up, or another replica came), or may miss what they
   * announce (false: it went down): notifications sent meanwhile are lost,
   * so whatever they would invalidate is suspect.
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
  let closed = false;

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

  const connection = createListenConnection({
    listenUrl: options.listenUrl,
    db: options.db,
    log,
    healthCheckIntervalMs: options.healthCheckIntervalMs,
    listenProbeTimeoutMs: options.listenProbeTimeoutMs,
    presenceIntervalMs: options.presenceIntervalMs,
    lingerMs: options.listenLingerMs,
    applicationName: options.applicationName,
    onNotification,
    onHearing: async () => {
      options.onListening?.(true);
      // Whatever was emitted while we were not listening is in the store.
      await Promise.all([...topics.keys()].map((workflowId) => catchUp(workflowId)));
    },
    onDown: () => options.onListening?.(false),
  });

  return {
    start: (): Promise<void> => connection.start(),

    /** Whether the LISTEN connection is up (for readiness and tests). */
    isListening: (): boolean => connection.isUp(),

    /** Whether it LISTENs: another client is connected (tests). */
    hearsOthers: (): boolean => connection.hearsOthers(),

    /** Looks for other replicas to listen to now, as it does every `presenceIntervalMs` (tests). */
    lookForOthers: (): Promise<void> => connection.lookForOthers(),

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
    listenerPid: (): number | undefined => connection.pid(),

    async close(): Promise<void> {
      closed = true;
      await connection.close();
      for (const [workflowId, topic] of topics) dropTopic(workflowId, topic);
    },
  };
}

export type EventHub = ReturnType<typeof createEventHub>;

export type { Notification };
