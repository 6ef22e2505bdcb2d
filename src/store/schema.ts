import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';

/** Row types of the tables created by `migrations/`; keep in step with the SQL. */
export interface Database {
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
}

export interface TenantsTable {
  id: string;
  name: string;
  is_operator: Generated<boolean>;
  created_at: ColumnType<Date, never, never>;
}

export interface ApiKeysTable {
  id: string;
  tenant_id: string;
  name: string;
  prefix: string;
  key_hash: Buffer;
  scopes: string[];
  created_at: ColumnType<Date, never, never>;
  revoked_at: ColumnType<Date | null, never, Date | null>;
}

export type TenantRow = Selectable<TenantsTable>;
export type NewTenantRow = Insertable<TenantsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type NewApiKeyRow = Insertable<ApiKeysTable>;
