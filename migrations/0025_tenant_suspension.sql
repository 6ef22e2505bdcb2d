-- A tenant suspended by the operator (PATCH /v1/tenants/:id with
-- "suspended": true): since when; NULL while it is not. Its API keys and
-- stream tokens are refused with 403 tenant_suspended until the operator
-- lifts it.
--
-- Nullable with no default: added without rewriting the table, and a
-- replica of the release before, which reads tenants with SELECT * and
-- maps the columns it knows, goes on working beside it (not refusing a
-- suspended tenant until it is replaced).
ALTER TABLE tenants ADD COLUMN suspended_at timestamptz;
