import type { DbOrTx } from './database.js';
import type { NewLlmCallRow } from './schema.js';

export function llmCallsRepository(db: DbOrTx) {
  return {
    /** One multi-row INSERT: the ledger writes in batches, not a round trip per attempt. */
    async insertMany(rows: NewLlmCallRow[]): Promise<void> {
      if (rows.length === 0) return;
      await db.insertInto('llm_calls').values(rows).execute();
    },

    async listByWorkflow(tenantId: string, workflowId: string) {
      return db
        .selectFrom('llm_calls')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('workflow_id', '=', workflowId)
        .orderBy('id')
        .execute();
    },

    async listByTenant(tenantId: string, limit = 100) {
      return db
        .selectFrom('llm_calls')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .orderBy('id', 'desc')
        .limit(limit)
        .execute();
    },
  };
}
