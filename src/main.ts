import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { type Config, ConfigError, loadConfig } from './config.js';
import { buildApp } from './http/app.js';
import { createLogger } from './logger.js';
import { closeServices, createServices, type Services } from './services.js';
import { type EmbeddedPostgres, startEmbeddedPostgres } from './store/embedded-postgres.js';
import { migrate, readMigrations } from './store/migrate.js';
import { saveBootstrapKey } from './tenancy/bootstrap-key-file.js';
import type { IssuedApiKey } from './tenancy/types.js';

/**
 * The process: read the environment, start (or reach) the database, migrate,
 * bootstrap, listen, and shut down cleanly on SIGTERM/SIGINT. Everything else
 * is built by factories that tests use too.
 */

interface Running {
  config: Config;
  log: Logger;
  app?: FastifyInstance;
  services?: Services;
  embedded?: EmbeddedPostgres;
  stopping: boolean;
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
  const log = createLogger(config);
  const running: Running = { config, log, stopping: false };
  process.once('SIGTERM', () => void shutdown(running, 'SIGTERM'));
  process.once('SIGINT', () => void shutdown(running, 'SIGINT'));

  try {
    await start(running);
  } catch (error) {
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
    running.embedded = await startEmbeddedPostgres({
      dataDir: config.WAYMARK_DATA_DIR,
      port: config.WAYMARK_EMBEDDED_PG_PORT,
      log,
    });
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
  const result = await migrate(running.services.database.pool, log, migrations);
  log.info({ applied: result.applied, current: result.current }, 'database migrations are current');
  const bootstrap = await running.services.tenancy.bootstrap();
  await running.services.hub.start();
  running.services.retention.start();
  running.services.reclaimer.start();

  running.app = await buildApp(running.services);
  if (running.stopping) return;
  const address = await running.app.listen({ port: config.PORT, host: config.HOST });
  log.info({ address }, 'waymark is listening');
  if (bootstrap) await announceBootstrapKey(running, bootstrap.adminKey, address);
  running.services.startup.complete();
}

/** Prints the first admin key once and saves it for the quick start. */
async function announceBootstrapKey(
  running: Running,
  key: IssuedApiKey,
  address: string,
): Promise<void> {
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
      `Try: curl -H "Authorization: Bearer ${key.secret}" ${address}/v1/me`,
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
  if (running.stopping) return;
  running.stopping = true;
  const { log, config } = running;
  log.info({ reason, graceMs: config.SHUTDOWN_GRACE_MS }, 'shutting down');
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
