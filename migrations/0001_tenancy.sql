-- Tenants and their API keys. Every later table carries tenant_id.
CREATE TABLE tenants (
  id uuid PRIMARY KEY,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  -- The operator tenant (created at the first start) may create other tenants.
  is_operator boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- At most one operator tenant.
CREATE UNIQUE INDEX tenants_one_operator ON tenants (is_operator) WHERE is_operator;

CREATE TABLE api_keys (
  id uuid PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  -- The first characters of the key, shown in listings so a person can tell keys apart.
  prefix text NOT NULL,
  -- SHA-256 of the whole key; the key itself is never stored.
  key_hash bytea NOT NULL UNIQUE,
  scopes text[] NOT NULL CHECK (scopes <@ ARRAY['admin', 'member']::text[] AND cardinality(scopes) > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);
