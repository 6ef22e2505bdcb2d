import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { Config } from './config.js';
import { createLlm, type Llm } from './llm/create-llm.js';
import { type DatabaseHandle, openDatabase } from './store/database.js';
import type { Migration } from './store/migrate.js';
import { createTenancyService, type TenancyService } from './tenancy/service.js';
import { createEventHub, type EventHub } from './tracker/event-hub.js';

/**
 * Everything the HTTP app needs, built once per process in main.ts (and per
 * test). Passed explicitly: no module holds mutable state.
 */
export interface Services {
  config: Config;
  log: Logger;
  database: DatabaseHandle;
  /** The migrations this build knows; /readyz compares them with the database. */
  migrations: Migration[];
  tenancy: TenancyService;
  /** Model catalogue, router and usage ledger. */
  llm: Llm;
  /** This process's id among the replicas (lease owner, NOTIFY origin). */
  replicaId: string;
  /** Workflow event fan-out; `start()` opens its LISTEN connection. */
  hub: EventHub;
}

/** Builds the services over a database URL. Opens no connection until the first query. */
export function createServices(options: {
  config: Config;
  log: Logger;
  databaseUrl: string;
  migrations: Migration[];
  /** Where catalogue providers' named key variables are read; the process environment in main.ts. */
  env?: NodeJS.ProcessEnv;
}): Services {
  const database = openDatabase({
    url: options.databaseUrl,
    poolMax: options.config.DATABASE_POOL_MAX,
    log: options.log,
  });
  const replicaId = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  return {
    replicaId,
    hub: createEventHub({
      db: database.db,
      listenUrl: options.config.DATABASE_LISTEN_URL ?? options.databaseUrl,
      origin: replicaId,
      log: options.log,
    }),
    config: options.config,
    log: options.log,
    database,
    migrations: options.migrations,
    tenancy: createTenancyService(database.db),
    llm: createLlm({
      config: options.config,
      env: options.env ?? {},
      db: database.db,
      log: options.log,
    }),
  };
}

/** Releases what the services hold, in order: the ledger's last rows need the pool. */
export async function closeServices(services: Services): Promise<void> {
  await services.hub.close();
  await services.llm.close();
  await services.database.close();
}
