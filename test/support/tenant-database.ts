import pino from 'pino';
import { type DatabaseHandle, openDatabase } from '../../src/store/database.js';
import { createTenancyService } from '../../src/tenancy/service.js';
import { createTestDatabase, type TestDatabase } from './database.js';

export interface TenantDatabase {
  database: TestDatabase;
  handle: DatabaseHandle;
  /** The tenant the bootstrap created. */
  tenantId: string;
  /** Closes the pool, then drops the database. */
  close(): Promise<void>;
}

/** A fresh migrated database with its bootstrap tenant, for repository and orchestrator tests. */
export async function createTenantDatabase(
  options: { poolMax?: number } = {},
): Promise<TenantDatabase> {
  const database = await createTestDatabase();
  const handle = openDatabase({
    url: database.url,
    poolMax: options.poolMax ?? 2,
    log: pino({ level: 'silent' }),
  });
  const created = await createTenancyService(handle.db).bootstrap();
  if (!created) throw new Error('the bootstrap of a fresh database created no tenant');
  return {
    database,
    handle,
    tenantId: created.tenant.id,
    async close() {
      await handle.close();
      await database.drop();
    },
  };
}
