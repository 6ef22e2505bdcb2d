-- Sessions are listed by their last activity too (GET /v1/sessions
-- ?order=activity): a chat client lists first the conversation its user
-- talked in a minute ago. last_activity_at is the time of the session's
-- last message, its creation while it has none. updated_at is not it: a
-- PATCH of the title or metadata moves updated_at, and is no activity.
-- The append of a workflow's question and answer sets it
-- (src/store/sessions.ts exchangeAppend) in the UPDATE of the session row
-- it already makes, to the now() its messages take as created_at: a
-- session's turn gains no statement. During a rolling upgrade a replica of
-- the release before appends without setting it: such a session lists by
-- its activity before until its next turn on a replica of this release.
--
-- sessions_tenant_activity serves that order's keyset pages as
-- sessions_tenant_created serves creation's: a page costs the same however
-- deep it is. Ordering by the newest message at read time instead would
-- read every session of the tenant (and its last message) for each page.
-- The index's price is on the append: its UPDATE now changes an indexed
-- column, so it is no longer HOT (see migration 0013: five appends to one
-- session were five HOT updates before, none after) and adds an entry to
-- each of the table's four indexes, the metadata GIN index among them
-- (one entry per path in the metadata). Migration 0013 measured a HOT
-- update against one that was not at 0.423 against 0.449 ms at the
-- median, on workflows' four indexes; a turn also inserts two messages,
-- with two index entries each.
--
-- Existing sessions take their last message's created_at (that of its
-- highest seq), or their creation when they have none. Like
-- every migration it runs in the one migration transaction: the update
-- and the index are one pass over sessions each, while writes to sessions
-- wait.
ALTER TABLE sessions ADD COLUMN last_activity_at timestamptz;

UPDATE sessions s SET last_activity_at = coalesce((
  SELECT m.created_at FROM session_messages m
  WHERE m.session_id = s.id
  ORDER BY m.seq DESC LIMIT 1
), s.created_at);

ALTER TABLE sessions
  ALTER COLUMN last_activity_at SET DEFAULT now(),
  ALTER COLUMN last_activity_at SET NOT NULL;

CREATE INDEX sessions_tenant_activity ON sessions (tenant_id, last_activity_at DESC, id DESC);
