import type { DbOrTx } from './database.js';
import {
  type ListPosition,
  olderThan,
  type PositionedRow,
  positionMicros,
} from './list-position.js';
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

    /**
     * Newest first, keyset-paginated on (created_at DESC, id DESC), the
     * order of the tenants_created index (migration 0024): a page reads
     * its own rows however deep it is, and a tenant created meanwhile
     * never shifts a page (as OFFSET would, repeating or skipping one).
     */
    async list(page: {
      limit: number;
      after?: ListPosition;
    }): Promise<(TenantRow & PositionedRow)[]> {
      let query = db.selectFrom('tenants').selectAll().select(positionMicros('created'));
      if (page.after) query = query.where(olderThan(page.after));
      return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(page.limit).execute();
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
