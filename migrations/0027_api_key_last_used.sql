-- When an API key was last used, to the hour (each replica writes it at
-- most once an hour per key): for an admin looking for keys nobody uses
-- any more. NULL: not used since this migration.
--
-- Nullable with no default: added without rewriting the table; a replica
-- of the release before neither reads nor writes it.
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
