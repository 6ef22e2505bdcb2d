import type { DbOrTx } from './database.js';
import type { HttpToolRow, NewHttpToolRow } from './schema.js';

/** HTTP tools of a tenant. Every query is scoped by tenant. */
export function httpToolsRepository(db: DbOrTx) {
  return {
    /** Undefined when the tenant already has a tool of that name (the unique index decides, so two racing creates cannot both win). */
    async insert(row: NewHttpToolRow): Promise<HttpToolRow | undefined> {
      return db
        .insertInto('http_tools')
        .values(row)
        .onConflict((conflict) => conflict.columns(['tenant_id', 'name']).doNothing())
        .returningAll()
        .executeTakeFirst();
    },

    async listByTenant(tenantId: string): Promise<HttpToolRow[]> {
      return db
        .selectFrom('http_tools')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('name')
        .execute();
    },

    async findById(tenantId: string, id: string): Promise<HttpToolRow | undefined> {
      return db
        .selectFrom('http_tools')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** True when a row was deleted. */
    async delete(tenantId: string, id: string): Promise<boolean> {
      const result = await db
        .deleteFrom('http_tools')
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
      return result.numDeletedRows > 0n;
    },
  };
}

export type HttpToolsRepository = ReturnType<typeof httpToolsRepository>;
