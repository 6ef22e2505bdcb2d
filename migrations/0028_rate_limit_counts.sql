-- Requests each tenant was let through per rate-limit window, summed over
-- the replicas (README "Rate limits"): each replica counts in memory and
-- adds what it counted here every RATE_LIMIT_SYNC_MS, reading back the
-- sum, so that a tenant's limit holds across replicas.
--
-- UNLOGGED: a count is worth the current window and the one before it; a
-- crash of the database empties the table, which lets tenants through
-- again for at most two windows, and every write is spared the WAL.
-- `window_ms` is in the key so that replicas configured with different
-- windows (during a change of RATE_LIMIT_WINDOW_MS) never add to each
-- other's counts. Rows of windows past are deleted by the replicas.
CREATE UNLOGGED TABLE rate_limit_counts (
  key text NOT NULL,
  window_ms integer NOT NULL,
  window_start timestamptz NOT NULL,
  count bigint NOT NULL,
  PRIMARY KEY (key, window_ms, window_start)
);
