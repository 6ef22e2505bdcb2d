import type { Insertable, Selectable } from 'kysely';
import type { DbOrTx } from './database.js';
import type { Database } from './schema.js';

/** The tables of what a tenant registers by name: HTTP tools and MCP servers. */
export type EndpointTable = 'http_tools' | 'mcp_servers';

/**
 * A tenant's registered endpoints of one kind (HTTP tools, MCP servers):
 * the same rows, keyed by id and unique by name within the tenant. Every
 * query is scoped by tenant.
 */
export function tenantEndpointsRepository<T extends EndpointTable>(db: DbOrTx, table: T) {
  // Kysely cannot follow a table name chosen by a type parameter through its
  // builders; both tables have the columns used here (id, tenant_id, name),
  // so the queries are typed for one and the rows returned as the caller's.
  const from = table as 'http_tools';
  type Row = Selectable<Database[T]>;
  return {
    /** Undefined when the tenant already has one of that name (the unique index decides, so two racing creates cannot both win). */
    async insert(row: Insertable<Database[T]>): Promise<Row | undefined> {
      const inserted = await db
        .insertInto(from)
        .values(row as Insertable<Database['http_tools']>)
        .onConflict((conflict) => conflict.columns(['tenant_id', 'name']).doNothing())
        .returningAll()
        .executeTakeFirst();
      return inserted as Row | undefined;
    },

    async listByTenant(tenantId: string): Promise<Row[]> {
      const listed = await db
        .selectFrom(from)
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('name')
        .execute();
      return listed as Row[];
    },

    async findById(tenantId: string, id: string): Promise<Row | undefined> {
      const found = await db
        .selectFrom(from)
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
      return found as Row | undefined;
    },

    /** True when a row was deleted. */
    async delete(tenantId: string, id: string): Promise<boolean> {
      const result = await db
        .deleteFrom(from)
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
      return result.numDeletedRows > 0n;
    },
  };
}
