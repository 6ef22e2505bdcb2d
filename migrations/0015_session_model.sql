-- A session may name the model its workflows use when their request names
-- none (model choice: the request's, then the session's, then the tenant's
-- default, then the system default). NULL: the session names none.
ALTER TABLE sessions ADD COLUMN model text;
