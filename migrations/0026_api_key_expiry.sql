-- An API key's expiry, set when it is issued (POST /v1/api-keys with
-- "expiresAt"): from then on it authenticates nothing (401
-- api_key_expired). NULL: it never expires.
--
-- Nullable with no default: added without rewriting the table, and a
-- replica of the release before, which reads keys with the columns it
-- knows, goes on working beside it (accepting an expired key until it is
-- replaced).
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
