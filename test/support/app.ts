import type { FastifyInstance } from 'fastify';
import pino from 'pino';
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
  const config = loadConfig({ LOG_LEVEL: 'silent', ...env });
  const services = createServices({
    config,
    log: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
    databaseUrl: database.url,
    migrations: await readMigrations(),
  });
  await services.hub.start();
  const app = await buildApp(services);
  await app.ready();
  return {
    app,
    services,
    database,
    async close() {
      await app.close();
      await closeServices(services);
      await database.drop();
    },
  };
}

export function bearer(secret: string): { authorization: string } {
  return { authorization: `Bearer ${secret}` };
}
