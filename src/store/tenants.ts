import type { DbOrTx } from './database.js';
import type { NewTenantRow, TenantRow, TenantUpdate } from './schema.js';

export function tenantsRepository(db: DbOrTx) {
  return {
    async insert(row: NewTenantRow): Promise<TenantRow> {
      return db.insertInto('tenants').values(row).returningAll().executeTakeFirstOrThrow();
    },

    async findById(id: string): Promise<TenantRow | undefined> {
      return db.selectFrom('tenants').selectAll().where('id', '=', id).executeTakeFirst();
    },

    /** Locks the row until the transaction ends, so concurrent updates of one tenant queue. */
    async lockById(id: string): Promise<TenantRow | undefined> {
      return db
        .selectFrom('tenants')
        .selectAll()
        .where('id', '=', id)
        .forUpdate()
        .executeTakeFirst();
    },

    async update(id: string, changes: TenantUpdate): Promise<TenantRow | undefined> {
      return db
        .updateTable('tenants')
        .set(changes)
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirst();
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
