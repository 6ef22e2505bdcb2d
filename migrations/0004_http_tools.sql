-- HTTP tools: endpoints a tenant registers for its agents to call.

CREATE TABLE http_tools (
  id uuid PRIMARY KEY,
  tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  -- Unique per tenant (index below); not shadowing a built-in is checked by the service,
  -- which knows the built-ins' names.
  name text NOT NULL CHECK (name ~ '^[a-zA-Z][a-zA-Z0-9_-]{0,63}$'),
  description text NOT NULL CHECK (length(description) BETWEEN 1 AND 4000),
  -- JSON Schema of the arguments: an object schema, offered to the model as given.
  -- json, not jsonb: jsonb reorders keys, and the order of `properties` is the
  -- order the model fills the arguments in and the author reads them back.
  parameters json NOT NULL CHECK (json_typeof(parameters) = 'object'),
  url text NOT NULL CHECK (url ~ '^https?://'),
  -- Header name -> value, sent with every call. Values are secrets (tokens):
  -- stored so the service can send them, never returned by the API.
  headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
  timeout_ms integer NOT NULL CHECK (timeout_ms BETWEEN 100 AND 120000),
  -- Run one at a time, never alongside other tool calls of the same turn.
  sequential boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX http_tools_tenant_name ON http_tools (tenant_id, name);
