-- A workflow's run offers its model the tenant's HTTP tools and MCP
-- servers. A run starts before its insert answers, with the tools the
-- replica read for the tenant before (src/workflows/early-start.ts), and
-- the insert checks they are still the tenant's. It read them all to do
-- so (two json_agg subqueries); now it reads this number, which changes
-- with every change to either table, in the same transaction.
--
-- Why: the two subqueries were the costliest part of the insert. Replayed
-- side by side (embedded PostgreSQL 18, 2026-12-02) the insert took 0.523
-- ms at the median with them and 0.470 with a lookup of the tenant's row
-- instead; in bench/simple-path, alternating the two per workflow in one
-- run, the overhead p50 at concurrency 1 read 77 and 82 µs lower with the
-- lookup, in two runs of 3,000 workflows.
--
-- Bumped by a row trigger, so that no writer (the API, an operator's own
-- statement) can change a tool without it. It updates the tenant's row
-- without touching a key, which the workflow inserts' foreign-key checks
-- (a key share lock) never wait for.
ALTER TABLE tenants ADD COLUMN endpoints_version bigint NOT NULL DEFAULT 0;

CREATE FUNCTION bump_tenant_endpoints_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN
    UPDATE tenants SET endpoints_version = endpoints_version + 1 WHERE id = OLD.tenant_id;
  END IF;
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.tenant_id IS DISTINCT FROM OLD.tenant_id) THEN
    UPDATE tenants SET endpoints_version = endpoints_version + 1 WHERE id = NEW.tenant_id;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER http_tools_bump_endpoints_version
  AFTER INSERT OR UPDATE OR DELETE ON http_tools
  FOR EACH ROW EXECUTE FUNCTION bump_tenant_endpoints_version();

CREATE TRIGGER mcp_servers_bump_endpoints_version
  AFTER INSERT OR UPDATE OR DELETE ON mcp_servers
  FOR EACH ROW EXECUTE FUNCTION bump_tenant_endpoints_version();
