-- An API key's own rate limit: requests per RATE_LIMIT_WINDOW_MS that the
-- key may make, within its tenant's limit (README "Rate limits"); NULL:
-- only the tenant's applies. Set when the key is issued.
--
-- Nullable with no default: added without rewriting the table; a replica
-- of the release before neither reads nor applies it. The upper bound is
-- the API's, as for tenants.rate_limit_max.
ALTER TABLE api_keys ADD COLUMN rate_limit_max integer CHECK (rate_limit_max > 0);
