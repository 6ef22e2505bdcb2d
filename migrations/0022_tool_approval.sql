-- Human approval of tool calls: an HTTP tool, or every tool of an MCP
-- server, may require the user's approval before each call. The tool loop
-- then pauses (awaiting_input, tool_approval) for POST
-- /v1/workflows/:id/approve (src/orchestrator/tool-loop/held-calls.ts).
--
-- A column with a constant default is added without rewriting the table.
ALTER TABLE http_tools ADD COLUMN requires_approval boolean NOT NULL DEFAULT false;
ALTER TABLE mcp_servers ADD COLUMN requires_approval boolean NOT NULL DEFAULT false;

-- As in 0020: the new check allows every value the old one did, so NOT
-- VALID spares the scan of the table under this migration's lock.
ALTER TABLE workflows DROP CONSTRAINT workflows_awaiting_reason_check;
ALTER TABLE workflows ADD CONSTRAINT workflows_awaiting_reason_check
  CHECK (awaiting_reason IN ('checkpoint', 'clarification', 'stage_failed', 'synthesis_failed',
    'tool_approval')) NOT VALID;
