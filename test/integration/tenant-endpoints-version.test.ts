import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { listTenantEndpoints } from '../../src/store/tenant-endpoints.js';
import { useTrackerDatabase } from '../support/tracker-database.js';

/**
 * A tenant's endpoints_version changes with every change to its HTTP tools
 * or MCP servers, in the same transaction (migration 0014): a workflow's
 * insert reads it to know whether the tools this replica remembers are
 * still the tenant's (src/workflows/early-start.ts).
 */
const setup = useTrackerDatabase();

async function newTenant(): Promise<string> {
  const id = randomUUID();
  await setup.handle.pool.query('INSERT INTO tenants (id, name) VALUES ($1, $2)', [id, `t ${id}`]);
  return id;
}

async function versionOf(tenantId: string): Promise<string> {
  return (await listTenantEndpoints(setup.handle.db, tenantId)).version;
}

describe('a tenant’s endpoints version', () => {
  it('changes with each insert, update and delete of its HTTP tools and MCP servers, and no other tenant’s', async () => {
    const tenantId = await newTenant();
    const other = await newTenant();
    const query = (text: string, values: unknown[]) => setup.handle.pool.query(text, values);
    const seen = [await versionOf(tenantId)];
    const otherBefore = await versionOf(other);
    const toolId = randomUUID();
    const serverId = randomUUID();
    const changes: Array<[string, unknown[]]> = [
      [
        `INSERT INTO http_tools (id, tenant_id, name, description, parameters, url, timeout_ms)
         VALUES ($1, $2, 'weather', 'Weather', '{"type":"object"}', 'https://tools.example/w', 5000)`,
        [toolId, tenantId],
      ],
      ['UPDATE http_tools SET description = $2 WHERE id = $1', [toolId, 'The weather']],
      [
        `INSERT INTO mcp_servers (id, tenant_id, name, url, timeout_ms)
         VALUES ($1, $2, 'docs', 'https://mcp.example/', 5000)`,
        [serverId, tenantId],
      ],
      ['UPDATE mcp_servers SET url = $2 WHERE id = $1', [serverId, 'https://mcp.example/v2']],
      ['DELETE FROM mcp_servers WHERE id = $1', [serverId]],
      ['DELETE FROM http_tools WHERE id = $1', [toolId]],
    ];
    for (const [text, values] of changes) {
      await query(text, values);
      seen.push(await versionOf(tenantId));
    }

    expect(new Set(seen).size).toBe(changes.length + 1);
    expect(await versionOf(other)).toBe(otherBefore);
  });

  it('is read with the endpoints it belongs to', async () => {
    const tenantId = await newTenant();
    const before = await listTenantEndpoints(setup.handle.db, tenantId);
    await setup.handle.pool.query(
      `INSERT INTO http_tools (id, tenant_id, name, description, parameters, url, timeout_ms)
       VALUES ($1, $2, 'lookup', 'Lookup', '{"type":"object"}', 'https://tools.example/l', 5000)`,
      [randomUUID(), tenantId],
    );
    const after = await listTenantEndpoints(setup.handle.db, tenantId);

    expect(before.endpoints.httpTools).toEqual([]);
    expect(after.endpoints.httpTools.map((tool) => tool.name)).toEqual(['lookup']);
    expect(after.version).not.toBe(before.version);
  });
});
