-- The session's last_seq as the workflow's insert saw it: the history its
-- runs read is the session's messages up to that seq, a committed beginning
-- of the session, the same for its first run and every resumed one. NULL:
-- no session, or a workflow inserted before this column (its runs cut the
-- history by time as before).
ALTER TABLE workflows ADD COLUMN session_seq integer;
