import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import type { TestProject } from 'vitest/node';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/store/embedded-postgres.js';
import { migrate } from '../../src/store/migrate.js';

/**
 * One PostgreSQL server for the whole run: DATABASE_URL when set, else a
 * testcontainers container when a Docker engine answers, else an embedded
 * PostgreSQL. A migrated template database is made once; each test file
 * clones it (CREATE DATABASE ... TEMPLATE), which takes milliseconds.
 */

declare module 'vitest' {
  export interface ProvidedContext {
    /** A URL on the test server whose user may CREATE DATABASE. */
    testDatabaseAdminUrl: string;
    /** Name of the migrated template database. */
    testDatabaseTemplate: string;
  }
}

const log = pino({ level: process.env.TEST_LOG_LEVEL ?? 'error' });

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await startTestServer();
  const template = `waymark_template_${process.pid}`;
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${template}`);
  await admin.query(`CREATE DATABASE ${template}`);
  await admin.end();

  const templatePool = new pg.Pool({
    connectionString: withDatabase(server.adminUrl, template),
    max: 1,
  });
  await migrate(templatePool, log);
  // Connections to the template would block CREATE DATABASE ... TEMPLATE.
  await templatePool.end();

  project.provide('testDatabaseAdminUrl', server.adminUrl);
  project.provide('testDatabaseTemplate', template);
  return async () => {
    const client = new pg.Client({ connectionString: server.adminUrl });
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
    await client.end();
    await server.stop();
  };
}

interface TestServer {
  adminUrl: string;
  stop(): Promise<void>;
}

async function startTestServer(): Promise<TestServer> {
  if (process.env.DATABASE_URL) {
    log.info('tests use DATABASE_URL');
    return { adminUrl: process.env.DATABASE_URL, stop: async () => undefined };
  }
  const container = await startContainer();
  if (container) return container;
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'waymark-test-pg-'));
  let embedded: EmbeddedPostgres;
  try {
    embedded = await startEmbeddedPostgres({ dataDir, port: 0, log });
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  return {
    adminUrl: embedded.adminUrl,
    async stop() {
      await embedded.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

async function startContainer(): Promise<TestServer | undefined> {
  const { getContainerRuntimeClient } = await import('testcontainers');
  try {
    await getContainerRuntimeClient();
  } catch {
    log.info('no Docker engine answers; tests use an embedded PostgreSQL');
    return undefined;
  }
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:17-alpine').start();
  return {
    adminUrl: container.getConnectionUri(),
    async stop() {
      await container.stop();
    },
  };
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}
