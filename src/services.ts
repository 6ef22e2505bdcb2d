import type { Logger } from 'pino';
import type { Config } from './config.js';
import { type DatabaseHandle, openDatabase } from './store/database.js';
import type { Migration } from './store/migrate.js';
import { createTenancyService, type TenancyService } from './tenancy/service.js';

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
}

/** Builds the services over a database URL. Opens no connection until the first query. */
export function createServices(options: {
  config: Config;
  log: Logger;
  databaseUrl: string;
  migrations: Migration[];
}): Services {
  const database = openDatabase({
    url: options.databaseUrl,
    poolMax: options.config.DATABASE_POOL_MAX,
    log: options.log,
  });
  return {
    config: options.config,
    log: options.log,
    database,
    migrations: options.migrations,
    tenancy: createTenancyService(database.db),
  };
}
