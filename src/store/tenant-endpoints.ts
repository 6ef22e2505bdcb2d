import { type Insertable, type RawBuilder, type Selectable, sql, type Updateable } from 'kysely';
import { type Db, type DbOrTx, inTransaction } from './database.js';
import type { Database, HttpToolRow, McpServerRow } from './schema.js';

/** The tables of what a tenant registers by name: HTTP tools and MCP servers. */
export type EndpointTable = 'http_tools' | 'mcp_servers';

/**
 * What a change may set: not the id and tenant, which name the row, nor
 * the name, which workflows name their tools by (a workflow's `tools`, a
 * plan's stages, the calls in its conversation).
 */
export type EndpointChanges<T extends EndpointTable> = Omit<
  Updateable<Database[T]>,
  'id' | 'tenant_id' | 'name' | 'created_at'
>;

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
    /** How many the tenant has (the per-tenant cap: insertEndpoint). */
    async countByTenant(tenantId: string): Promise<number> {
      const { count } = await db
        .selectFrom(from)
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .where('tenant_id', '=', tenantId)
        .executeTakeFirstOrThrow();
      return Number(count);
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

    /**
     * Sets `changes` on the tenant's row in one statement (the last of two
     * racing changes wins, field by field); undefined when it has no such
     * row, or when `unchanged` is given and the row's URL or headers are no
     * longer those. The row trigger of migration 0014 bumps the tenant's
     * endpoints_version with it.
     */
    async update(
      tenantId: string,
      id: string,
      changes: EndpointChanges<T>,
      unchanged?: { url: string; headers: Record<string, string> },
    ): Promise<Row | undefined> {
      let update = db
        .updateTable(from)
        .set(changes as Updateable<Database['http_tools']>)
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id);
      if (unchanged) {
        update = update
          .where('url', '=', unchanged.url)
          .where(sql<boolean>`headers = ${JSON.stringify(unchanged.headers)}::jsonb`);
      }
      const updated = await update.returningAll().executeTakeFirst();
      return updated as Row | undefined;
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

/** What `insertEndpoint` did: the row inserted, or why none was. */
export type EndpointInsert<Row> =
  | { inserted: Row }
  | { refused: 'name_taken' }
  | { refused: 'limit_reached'; limit: number };

/**
 * Inserts a tenant's endpoint unless it has `limit` of that kind already
 * or one of that name (the unique index decides).
 *
 * The count and the insert run in one transaction after the tenant's row is
 * locked, so a tenant's creates queue there and each counts what the one
 * before it committed: two racing at limit - 1 cannot both win. One
 * INSERT ... SELECT ... WHERE count < limit would not do: a statement
 * counts from the snapshot it started with, even after waiting for a lock.
 * FOR NO KEY UPDATE is the lock the endpoints_version trigger (migration
 * 0014) takes anyway; unlike FOR UPDATE it does not block the tenant's
 * inserts elsewhere (workflows, sessions), whose foreign keys lock the
 * row FOR KEY SHARE.
 */
export async function insertEndpoint<T extends EndpointTable>(
  db: Db,
  options: { table: T; row: Insertable<Database[T]> & { tenant_id: string }; limit: number },
): Promise<EndpointInsert<Selectable<Database[T]>>> {
  const from = options.table as 'http_tools';
  const tenantId = options.row.tenant_id;
  return inTransaction(db, async (tx) => {
    await tx
      .selectFrom('tenants')
      .select('id')
      .where('id', '=', tenantId)
      .forNoKeyUpdate()
      .execute();
    const count = await tenantEndpointsRepository(tx, options.table).countByTenant(tenantId);
    if (count >= options.limit) {
      return { refused: 'limit_reached', limit: options.limit } as const;
    }
    const inserted = await tx
      .insertInto(from)
      .values(options.row as Insertable<Database['http_tools']>)
      .onConflict((conflict) => conflict.columns(['tenant_id', 'name']).doNothing())
      .returningAll()
      .executeTakeFirst();
    if (!inserted) return { refused: 'name_taken' } as const;
    return { inserted: inserted as Selectable<Database[T]> };
  });
}

/** A row as json_agg gives it: its timestamp as text. */
type Aggregated<Row> = Omit<Row, 'created_at'> & { created_at: string };

/** Every HTTP tool and MCP server of a tenant: what a workflow run offers its model. */
export interface TenantEndpoints {
  httpTools: HttpToolRow[];
  mcpServers: McpServerRow[];
}

/** The columns `tenantEndpointColumns` adds to a row. */
export interface TenantEndpointsJson {
  tenant_http_tools: Aggregated<HttpToolRow>[];
  tenant_mcp_servers: Aggregated<McpServerRow>[];
}

/**
 * A tenant's HTTP tools and MCP servers as two json columns of any
 * statement (to be named `tenant_http_tools`, `tenant_mcp_servers`), so a
 * statement that runs anyway (a user's answer or review, which launches
 * the workflow's run) reads them without a round trip of its own;
 * `endpointsOf` turns them back into rows.
 */
export function tenantEndpointColumns(tenantId: string | RawBuilder<string>) {
  return {
    tenant_http_tools: sql<unknown>`(SELECT coalesce(json_agg(h ORDER BY h.name), '[]')
      FROM http_tools h WHERE h.tenant_id = ${tenantId})`,
    tenant_mcp_servers: sql<unknown>`(SELECT coalesce(json_agg(m ORDER BY m.name), '[]')
      FROM mcp_servers m WHERE m.tenant_id = ${tenantId})`,
  };
}

export function endpointsOf(row: TenantEndpointsJson | undefined): TenantEndpoints {
  const withDate = <Row>(aggregated: Aggregated<Row>) =>
    ({ ...aggregated, created_at: new Date(aggregated.created_at) }) as Row;
  return {
    httpTools: (row?.tenant_http_tools ?? []).map((tool) => withDate<HttpToolRow>(tool)),
    mcpServers: (row?.tenant_mcp_servers ?? []).map((server) => withDate<McpServerRow>(server)),
  };
}

/**
 * A tenant's endpoints with the version they were read at: the tenant's
 * `endpoints_version`, which every change to its HTTP tools or MCP servers
 * changes in the same transaction (migration 0014). A statement that reads
 * the same version reads the same endpoints.
 */
export interface VersionedEndpoints {
  /** A bigint, as text. */
  version: string;
  endpoints: TenantEndpoints;
}

/** The tenant's `endpoints_version` as a column of any statement (to be named `endpoints_version`). */
export function tenantEndpointsVersion(tenantId: string | RawBuilder<string>): RawBuilder<string> {
  return sql<string>`(SELECT endpoints_version FROM tenants WHERE id = ${tenantId})`;
}

/** A tenant's endpoints and their version, in one statement (so from one snapshot). */
export async function listTenantEndpoints(
  db: DbOrTx,
  tenantId: string,
): Promise<VersionedEndpoints> {
  const columns = tenantEndpointColumns(tenantId);
  // Null when there is no such tenant.
  const result = await sql<TenantEndpointsJson & { endpoints_version: string | null }>`
    SELECT ${tenantEndpointsVersion(tenantId)} AS endpoints_version,
           ${columns.tenant_http_tools} AS tenant_http_tools,
           ${columns.tenant_mcp_servers} AS tenant_mcp_servers`.execute(db);
  const row = result.rows[0];
  if (!row || row.endpoints_version === null) throw new Error(`no tenant ${tenantId}`);
  return { version: row.endpoints_version, endpoints: endpointsOf(row) };
}
