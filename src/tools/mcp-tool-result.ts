import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import type { ToolResult } from './types.js';

/** An MCP tool result as the model sees it: text joined, other content summarised. */
export function toolResultFromMcp(result: CallToolResult | { toolResult: unknown }): ToolResult {
  // Protocol 2024-10-07 and older answered `{ toolResult }`.
  if (!('content' in result)) return { content: JSON.stringify(result.toolResult ?? null) };
  const parts = (result.content ?? []).map(describeContent);
  if (parts.length === 0 && result.structuredContent !== undefined) {
    parts.push(JSON.stringify(result.structuredContent));
  }
  const content = parts.length > 0 ? parts.join('\n') : '(the tool returned no content)';
  return result.isError ? { content, isError: true } : { content };
}

function describeContent(block: ContentBlock): string {
  switch (block.type) {
    case 'text':
      return block.text;
    case 'image':
    case 'audio':
      return `[${block.type} content, ${block.mimeType}, ${base64Bytes(block.data)} bytes, not shown]`;
    case 'resource_link':
      return `[resource link: ${block.uri}${block.name ? ` (${block.name})` : ''}]`;
    case 'resource': {
      const resource = block.resource;
      if ('text' in resource && typeof resource.text === 'string') return resource.text;
      return `[resource ${resource.uri}${resource.mimeType ? `, ${resource.mimeType}` : ''}, binary, not shown]`;
    }
    default:
      return `[${(block as { type: string }).type} content, not shown]`;
  }
}

function base64Bytes(data: string): number {
  return Math.floor((data.length * 3) / 4) - (data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0);
}
