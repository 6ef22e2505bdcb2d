import type { DbOrTx } from './database.js';
import type { NewTenantRow, TenantRow } from './schema.js';

export function tenantsRepository(db: DbOrTx) {
  return {
    async insert(row: NewTenantRow): Promise<TenantRow> {
      return db.insertInto('tenants').values(row).returningAll().executeTakeFirstOrThrow();
    },

    async findById(id: string): Promise<TenantRow | undefined> {
      return db.selectFrom('tenants').selectAll().where('id', '=', id).executeTakeFirst();
    },

    async count(): Promise<number> {
      const row = await db
        .selectFrom('tenants')
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .executeTakeFirstOrThrow();
      return Number(row.count);
    },
  };
}

export type TenantsRepository = ReturnType<typeof tenantsRepository>;
