import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { type Config, ConfigError, loadConfig } from './config.js';
import { buildApp } from './http/app.js';
import { configuredSecrets, createLogSecrets, type LogSecrets } from './log-secrets.js';
import { createLogger } from './logger.js';
import { closeServices, createServices, type Services } from './services.js';
import { type EmbeddedPostgres, startEmbeddedPostgres } from './store/embedded-postgres.js';
import { migrate, readMigrations } from './store/migrate.js';
import { saveBootstrapKey } from './tenancy/bootstrap-key-file.js';
import type { IssuedApiKey } from './tenancy/types.js';
import { within } from './within.js';

/**
 * The process: read the environment, start (or reach) the database, migrate,
 * bootstrap, listen, and shut down cleanly on SIGTERM/SIGINT. Everything else
 * is built by factories that tests use too.
 */

interface Running {
  config: Config;
  log: Logger;
  /** The values replaced in every log line; the embedded PostgreSQL's password joins them once known. */
  secrets: LogSecrets;
  app?: FastifyInstance;
  services?: Services;
  embedded?: EmbeddedPostgres;
  stopping: boolean;
  /** Aborted by a shutdown during the start: a wait it can give up (another replica's migration lock) ends. */
  startAborted: AbortController;
  /** Settles when the start has ended, however. */
  started?: Promise<unknown>;
  /** Settles when the embedded PostgreSQL's start (a first start's initdb) has ended, however. */
  embeddedStarted?: Promise<unknown>;
}

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`waymark: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const secrets = createLogSecrets(configuredSecrets(config, process.env));
  const log = createLogger(config, { secrets });
  const running: Running = {
    config,
    log,
    secrets,
    stopping: false,
    startAborted: new AbortController(),
  };
  // `on`, not `once`: Ctrl-C on `npm start` delivers SIGINT twice (the
  // terminal's and npm's), and a second signal left to Node's default
  // killed the process mid-drain, its embedded PostgreSQL orphaned.
  process.on('SIGTERM', () => void shutdown(running, 'SIGTERM'));
  process.on('SIGINT', () => void shutdown(running, 'SIGINT'));

  const starting = start(running);
  running.started = starting.catch(() => undefined);
  try {
    await starting;
  } catch (error) {
    // A shutdown during the start stops it; the shutdown ends the process.
    if (running.stopping) return;
    log.fatal({ err: error }, 'waymark failed to start');
    await releaseResources(running);
    process.exit(1);
  }
}

async function start(running: Running): Promise<void> {
  const { config, log } = running;
  let databaseUrl = config.DATABASE_URL;
  if (!databaseUrl) {
    log.info(
      { dataDir: config.WAYMARK_DATA_DIR },
      'DATABASE_URL is not set; starting embedded PostgreSQL',
    );
    const starting = startEmbeddedPostgres({
      dataDir: config.WAYMARK_DATA_DIR,
      port: config.WAYMARK_EMBEDDED_PG_PORT,
      log,
      onPassword: (password) => running.secrets.add(password),
    });
    running.embeddedStarted = starting.catch(() => undefined);
    running.embedded = await starting;
    databaseUrl = running.embedded.url;
    void running.embedded.exited.then((code) => {
      if (running.stopping) return;
      log.fatal({ code }, 'embedded PostgreSQL exited unexpectedly');
      void shutdown(running, 'embedded PostgreSQL exit', 1);
    });
  }
  if (running.stopping) return;

  const migrations = await readMigrations();
  running.services = createServices({
    config,
    log,
    databaseUrl,
    migrations,
    env: process.env,
    holdReadiness: true,
  });
  const result = await migrate(running.services.database.pool, log, {
    migrations,
    signal: running.startAborted.signal,
  });
  if (running.stopping) return;
  log.info({ applied: result.applied, current: result.current }, 'database migrations are current');
  // The key is saved and printed before the bootstrap commits, so a start
  // that fails later (the port in use, the LISTEN database out of reach)
  // never loses it: later starts find the tenant and create no other key.
  const bootstrap = await running.services.tenancy.bootstrap(({ adminKey }) =>
    deliverBootstrapKey(running, adminKey),
  );
  await running.services.hub.start();
  await loadKnownKeys(running);
  running.services.retention.start();
  running.services.reclaimer.start();

  running.app = await buildApp(running.services);
  if (running.stopping) return;
  const address = await running.app.listen({ port: config.PORT, host: config.HOST });
  log.info({ address }, 'waymark is listening');
  if (bootstrap) {
    process.stdout.write(
      `Try: curl -H "Authorization: Bearer ${bootstrap.adminKey.secret}" ${address}/v1/me\n`,
    );
  }
  running.services.startup.complete();
}

/**
 * The keys active now, known to this replica before it serves (see
 * AUTH_FAILURE_LIMIT): without them, it would learn its clients' keys only
 * as they come. A failure is logged; the replica serves all the same.
 */
async function loadKnownKeys(running: Running): Promise<void> {
  const services = running.services;
  if (!services) return;
  try {
    const known = await services.tenancy.loadKnownKeys();
    running.log.info({ known }, 'read the active API keys');
  } catch (error) {
    running.log.warn(
      { err: error },
      'reading the active API keys failed; keys are known as they are found',
    );
  }
}

/** Saves the first admin key for the quick start and prints it once. */
async function deliverBootstrapKey(running: Running, key: IssuedApiKey): Promise<void> {
  const { config, log } = running;
  let saved: string;
  try {
    saved = `It is also saved, readable only by you, in ${await saveBootstrapKey(config.WAYMARK_DATA_DIR, key.secret)}`;
  } catch (error) {
    log.error(
      { err: error },
      'could not save the bootstrap admin key; copy it from the output now',
    );
    saved = 'It could not be saved to a file: copy it now.';
  }
  process.stdout.write(
    [
      '',
      '================================================================',
      'Waymark created the operator tenant and its first admin API key.',
      'This is the only time the service prints it:',
      '',
      `  ${key.secret}`,
      '',
      saved,
      '================================================================',
      '',
    ].join('\n'),
  );
}

/**
 * Stop accepting, let in-flight requests and workflow runs finish within the
 * grace period, then close what is still open, the pool and the embedded
 * database.
 */
async function shutdown(running: Running, reason: string, exitCode = 0): Promise<void> {
  const { log, config } = running;
  if (running.stopping) {
    log.info({ reason }, 'already shutting down');
    return;
  }
  running.stopping = true;
  log.info({ reason, graceMs: config.SHUTDOWN_GRACE_MS }, 'shutting down');
  // A start under way ends first: stopped where it can be (the migration
  // lock's wait), else at its next step, within the grace. The embedded
  // PostgreSQL's own start is always waited for (seconds at most): exiting
  // under a first start's initdb orphaned it, its work then thrown away and
  // done again by the next start.
  running.startAborted.abort();
  await running.embeddedStarted;
  await settledWithin(running.started, config.SHUTDOWN_GRACE_MS);
  let forced = false;
  const grace = setTimeout(() => {
    forced = true;
    log.warn('grace period over; closing the connections still open');
    running.app?.server.closeAllConnections();
  }, config.SHUTDOWN_GRACE_MS);
  // Node closes idle keep-alive connections once, when the server starts
  // closing. A connection whose in-flight request ends later stays open
  // until its client hangs up, which would hold the shutdown (and end it
  // "forced") for the whole grace period; so sweep idle ones until closed.
  const idleSweep = setInterval(() => running.app?.server.closeIdleConnections(), 250);
  // Workflow runs get the same grace as requests, side by side. Event
  // streams end at once with a `retry:` hint (closing the app does that) and
  // their clients resume on another replica with Last-Event-ID. Runs still
  // going after the grace are stopped and their leases handed over: another
  // replica resumes them from their last persisted step. No workflow is
  // taken over from now on.
  const services = running.services;
  const drained = services?.reclaimer
    .stop()
    .then(() => services.executions.drain(config.SHUTDOWN_GRACE_MS))
    .catch((error: unknown) => {
      log.error({ err: error }, 'draining the workflow runs failed');
      exitCode = 1;
    });
  try {
    await running.app?.close();
  } catch (error) {
    log.error({ err: error }, 'closing the HTTP server failed');
    exitCode = 1;
  } finally {
    clearTimeout(grace);
    clearInterval(idleSweep);
  }
  await drained;
  if (!(await releaseResources(running))) exitCode = 1;
  log.info({ forced }, 'waymark stopped');
  process.exit(exitCode);
}

/** Waits for `work` to settle, at most `ms`. */
async function settledWithin(work: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (work) await within(work, ms);
}

/** Closes the pool, then stops the embedded database; true when both went well. */
async function releaseResources(running: Running): Promise<boolean> {
  running.stopping = true;
  let clean = true;
  try {
    if (running.services) await closeServices(running.services);
  } catch (error) {
    running.log.error({ err: error }, 'closing the services (usage ledger, database pool) failed');
    clean = false;
  }
  try {
    await running.embedded?.stop();
  } catch (error) {
    running.log.error({ err: error }, 'stopping embedded PostgreSQL failed');
    clean = false;
  }
  return clean;
}

await main();
