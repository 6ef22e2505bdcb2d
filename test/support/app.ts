import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { closeServices, createServices, type Services } from '../../src/services.js';
import { readMigrations } from '../../src/store/migrate.js';
import { createTestDatabase, type TestDatabase } from './database.js';

export interface TestApp {
  app: FastifyInstance;
  services: Services;
  database: TestDatabase;
  close(): Promise<void>;
}

/** The real app over a fresh, migrated database, for `inject` tests. */
export async function startTestApp(env: Record<string, string> = {}): Promise<TestApp> {
  const database = await createTestDatabase();
  const replica = await startTestAppOn(database, env);
  return {
    ...replica,
    async close() {
      await replica.close();
      await database.drop();
    },
  };
}

/**
 * Another replica over the database of an existing test app: its own
 * services, hub and LISTEN connection. The replicas already on the database
 * look for it before it returns, so they hear it from then on (`hubs`).
 * `close` leaves the database alone.
 */
export async function startTestAppOn(
  database: TestDatabase,
  env: Record<string, string> = {},
  /** Where its logs go; nowhere (TEST_LOG_LEVEL aside) unless given. */
  log: Logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
): Promise<TestApp> {
  const config = loadConfig({ LOG_LEVEL: 'silent', ...env });
  const services = createServices({
    config,
    log,
    databaseUrl: database.url,
    migrations: await readMigrations(),
    // Where catalogue providers' `apiKeyEnv` variables are read, as main.ts reads the process's.
    env,
  });
  await services.hub.start();
  for (const hub of database.hubs) await hub.lookForOthers();
  database.hubs.add(services.hub);
  const app = await buildApp(services);
  await app.ready();
  return {
    app,
    services,
    database,
    async close() {
      database.hubs.delete(services.hub);
      await app.close();
      await closeServices(services);
    },
  };
}

export function bearer(secret: string): { authorization: string } {
  return { authorization: `Bearer ${secret}` };
}

/** Listens on a free port of 127.0.0.1 (for real sockets and fetch); returns the port and `http://127.0.0.1:<port>`. */
export async function listenLocally(app: FastifyInstance): Promise<{ port: number; url: string }> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('the app listens on no port');
  return { port: address.port, url: `http://127.0.0.1:${address.port}` };
}
