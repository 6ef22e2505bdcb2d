-- Sessions are listed by what their metadata holds (GET /v1/sessions
-- ?metadata=, containment): a client keeps its end user's id there and
-- lists that user's conversations. jsonb_path_ops serves @> alone, in a
-- smaller index than the default operator class.
CREATE INDEX sessions_metadata ON sessions USING gin (metadata jsonb_path_ops);
