-- MCP servers: remote Model Context Protocol servers (streamable HTTP) a
-- tenant registers; their tools are offered to the tenant's workflows as
-- `<server name>__<tool name>`.

CREATE TABLE mcp_servers (
  id uuid PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  -- The prefix of its tools' names: short, so `<name>__<tool>` stays within
  -- the vendors' 64 characters for a tool name.
  name text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,31}$'),
  url text NOT NULL CHECK (url ~ '^https?://'),
  -- Header name -> value, sent with every request. Values are secrets (tokens):
  -- stored so the service can send them, never returned by the API.
  headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
  timeout_ms integer NOT NULL CHECK (timeout_ms BETWEEN 100 AND 120000),
  -- The tools the server listed when it was registered (name, description,
  -- inputSchema), shown by the listing without connecting to every server.
  -- Workflows list the tools live. json, not jsonb: the order of a schema's
  -- `properties` is kept.
  tools json NOT NULL DEFAULT '[]' CHECK (json_typeof(tools) = 'array'),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX mcp_servers_tenant_name ON mcp_servers (tenant_id, name);
