/**
 * What the real Messages API refuses with a 400 `invalid_request_error`
 * before answering, checked by the fake so that every test through it
 * fails on a request Anthropic would refuse: text blocks with no
 * non-whitespace text (in the system prompt or a message), `tool_use` ids
 * outside ^[a-zA-Z0-9_-]+$ or repeated in one request, and a `tool_result`
 * naming no earlier `tool_use`. The wording follows the API's.
 */

const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;

interface Block {
  type?: unknown;
  text?: unknown;
  id?: unknown;
  tool_use_id?: unknown;
}

function blocksOf(content: unknown): Block[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? (content as Block[]) : [];
}

function blankText(block: Block): boolean {
  return block.type === 'text' && typeof block.text === 'string' && !/\S/.test(block.text);
}

/** Why the Messages API would refuse `body`, or undefined. */
export function anthropicRefusal(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const { system, messages } = body as { system?: unknown; messages?: unknown };
  if (blocksOf(system).some(blankText)) {
    return 'system: text content blocks must contain non-whitespace text';
  }
  const toolUseIds = new Set<string>();
  const list = Array.isArray(messages) ? (messages as { content?: unknown }[]) : [];
  for (const [index, message] of list.entries()) {
    for (const block of blocksOf(message.content)) {
      if (blankText(block)) {
        return `messages.${index}: text content blocks must contain non-whitespace text`;
      }
      if (block.type === 'tool_use') {
        const id = String(block.id);
        if (!TOOL_USE_ID.test(id)) {
          return `messages.${index}.content.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
        }
        if (toolUseIds.has(id)) return `messages.${index}: \`tool_use\` ids must be unique`;
        toolUseIds.add(id);
      }
      if (block.type === 'tool_result' && !toolUseIds.has(String(block.tool_use_id))) {
        return `messages.${index}.content: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(block.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
      }
    }
  }
  return undefined;
}
