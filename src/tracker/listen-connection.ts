import pg from 'pg';
import type { Logger } from 'pino';
import type { Db } from '../store/database.js';
import { EVENTS_CHANNEL } from '../store/event-statement-parts.js';
import { probeListening } from './listen-probe.js';

/**
 * The event hub's one LISTEN connection (event-hub.ts). It is
 * health-checked and re-established when it drops; a (re)connect counts
 * once it has heard a notification sent through the pool
 * (listen-probe.ts).
 *
 * It LISTENs only while another client is connected to the database,
 * which may be another replica (of this release or an earlier one), that
 * is a client session in pg_stat_activity whose `application_name` is not
 * this replica's own (`applicationName`, its pool's and this connection's).
 * PostgreSQL wakes every listening backend of a database at each NOTIFY,
 * whatever its channels, so a replica alone that listened would be woken,
 * and told of its own events again, at every statement of every workflow:
 * ~0.35 ms of each workflow at concurrency 1 (bench simple-path, blocks
 * with and without another client alternated in one run, 2026-12-05). It
 * looks when it connects and every `presenceIntervalMs`: a replica that
 * starts LISTENs at once when another is there, and the others LISTEN
 * once they find it, then read what it announced before (`onHearing`).
 */
export interface ListenConnectionOptions {
  /** A direct connection's URL when DATABASE_URL goes through a transaction pooler. */
  listenUrl: string;
  db: Db;
  log: Logger;
  healthCheckIntervalMs?: number;
  /** A (re)connect's wait for its probe; LISTEN_PROBE_TIMEOUT_MS unless given. */
  listenProbeTimeoutMs?: number;
  /** How often it looks for the other replicas; 1 s unless given. */
  presenceIntervalMs?: number;
  /**
   * How long it goes on listening once it finds no other client: 60 s
   * unless given, so that a client that comes and goes (a script, a
   * monitor's query) does not make it LISTEN, read every topic and
   * UNLISTEN each time.
   */
  lingerMs?: number;
  /** This replica's connections' `application_name`; unset, every other client counts as another replica. */
  applicationName?: string;
  onNotification(message: pg.Notification): void;
  /**
   * Up, and hearing every other replica from now on (or alone): what they
   * announced before went unheard. A (re)connect waits for it.
   */
  onHearing(): Promise<void>;
  /** Down (or closed): notifications are lost until `onHearing`. */
  onDown(): void;
}

export function createListenConnection(options: ListenConnectionOptions) {
  const { log } = options;
  let client: pg.Client | undefined;
  /** LISTEN on the events channel is in effect on `client`. */
  let listening = false;
  let closed = false;
  let reconnectDelayMs = 100;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let healthTimer: NodeJS.Timeout | undefined;
  let presenceTimer: NodeJS.Timeout | undefined;
  /** The look for the others in progress, if any: one at a time. */
  let looking: Promise<void> | undefined;
  /** When it last found another client (performance.now()). */
  let othersSeenAt = Number.NEGATIVE_INFINITY;
  const lingerMs = options.lingerMs ?? 60_000;

  /** Whether a client other than this replica's connections is connected to the database. */
  async function othersConnected(connection: pg.Client): Promise<boolean> {
    const { rows } = await connection.query<{ others: boolean }>(
      `SELECT EXISTS (
        SELECT 1 FROM pg_stat_activity
        WHERE datname = current_database() AND backend_type = 'client backend'
          AND pid <> pg_backend_pid() AND ($1::text IS NULL OR application_name IS DISTINCT FROM $1)
      ) AS others`,
      [options.applicationName ?? null],
    );
    return rows[0]?.others === true;
  }

  async function connect(): Promise<void> {
    const next = new pg.Client({
      connectionString: options.listenUrl,
      keepAlive: true,
      application_name: options.applicationName,
    });
    next.on('notification', options.onNotification);
    next.on('error', (error) => drop(next, error));
    next.on('end', () => drop(next, new Error('the listening connection ended')));
    let others = false;
    try {
      await next.connect();
      // Before the channel, so a connection that cannot hear the pool never counts as listening.
      await probeListening({
        listener: next,
        db: options.db,
        timeoutMs: options.listenProbeTimeoutMs,
      });
      others = await othersConnected(next);
      if (others) {
        othersSeenAt = performance.now();
        await next.query(`LISTEN ${EVENTS_CHANNEL}`);
      }
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
    listening = others;
    reconnectDelayMs = 100;
    log.info(
      { otherClients: others },
      others ? 'listening for workflow events' : 'no other client connected: not listening',
    );
    await options.onHearing();
  }

  /** Looks for the others after the look in progress, if any. Never rejects. */
  function lookForOthers(): Promise<void> {
    const next = (looking ?? Promise.resolve()).then(lookNow);
    looking = next;
    void next.finally(() => {
      if (looking === next) looking = undefined;
    });
    return next;
  }

  /** LISTENs when another client has come, UNLISTENs `lingerMs` after the last one has gone. */
  async function lookNow(): Promise<void> {
    const current = client;
    if (!current) return;
    try {
      const others = await othersConnected(current);
      if (others) othersSeenAt = performance.now();
      const listen = others || (listening && performance.now() - othersSeenAt < lingerMs);
      if (client !== current || listen === listening) return;
      await current.query(`${listen ? 'LISTEN' : 'UNLISTEN'} ${EVENTS_CHANNEL}`);
      if (client !== current) return;
      listening = listen;
      log.info(
        listen
          ? 'another client is connected: listening for workflow events'
          : 'no other client is connected: no longer listening',
      );
      if (listen) await options.onHearing();
    } catch (error) {
      drop(current, error);
    }
  }

  function drop(dropped: pg.Client, error: unknown): void {
    if (client !== dropped) return;
    client = undefined;
    listening = false;
    options.onDown();
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
        () => drop(current, new Error('health check timed out')),
        interval,
      );
      current
        .query('SELECT 1')
        .then(() => clearTimeout(timeout))
        .catch((error: unknown) => {
          clearTimeout(timeout);
          drop(current, error);
        });
    }, interval);
    healthTimer.unref();
  }

  /** Another client may come or go at any time: looked for every `presenceIntervalMs`. */
  function startPresenceChecks(): void {
    presenceTimer = setInterval(() => {
      if (!looking) void lookForOthers();
    }, options.presenceIntervalMs ?? 1_000);
    presenceTimer.unref();
  }

  return {
    async start(): Promise<void> {
      await connect();
      startHealthChecks();
      startPresenceChecks();
    },

    isUp: (): boolean => client !== undefined,

    /** Whether it LISTENs: another client is connected (tests). */
    hearsOthers: (): boolean => listening,

    /** Looks for the other replicas now, as it does every `presenceIntervalMs` (tests). */
    lookForOthers,

    /** The connection's backend pid (tests). */
    pid: (): number | undefined =>
      (client as (pg.Client & { processID?: number }) | undefined)?.processID,

    async close(): Promise<void> {
      closed = true;
      clearTimeout(reconnectTimer);
      clearInterval(healthTimer);
      clearInterval(presenceTimer);
      const current = client;
      client = undefined;
      listening = false;
      options.onDown();
      await current?.end().catch(() => undefined);
    },
  };
}

export type ListenConnection = ReturnType<typeof createListenConnection>;
