import type { DbOrTx } from './database.js';
import type { McpServerRow, NewMcpServerRow } from './schema.js';

/** MCP servers of a tenant. Every query is scoped by tenant. */
export function mcpServersRepository(db: DbOrTx) {
  return {
    /** Undefined when the tenant already has a server of that name (the unique index decides, so two racing creates cannot both win). */
    async insert(row: NewMcpServerRow): Promise<McpServerRow | undefined> {
      return db
        .insertInto('mcp_servers')
        .values(row)
        .onConflict((conflict) => conflict.columns(['tenant_id', 'name']).doNothing())
        .returningAll()
        .executeTakeFirst();
    },

    async listByTenant(tenantId: string): Promise<McpServerRow[]> {
      return db
        .selectFrom('mcp_servers')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('name')
        .execute();
    },

    async findById(tenantId: string, id: string): Promise<McpServerRow | undefined> {
      return db
        .selectFrom('mcp_servers')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** True when a row was deleted. */
    async delete(tenantId: string, id: string): Promise<boolean> {
      const result = await db
        .deleteFrom('mcp_servers')
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
      return result.numDeletedRows > 0n;
    },
  };
}

export type McpServersRepository = ReturnType<typeof mcpServersRepository>;
