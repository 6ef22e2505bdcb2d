import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { loadConfig } from '../../../src/config.js';
import { AppError } from '../../../src/errors.js';
import { toolParametersJsonSchema } from '../../../src/llm/tool-arguments.js';
import {
  BUILTIN_TOOL_NAMES,
  builtinTools,
  createToolRegistry,
} from '../../../src/tools/registry.js';
import type { Tool } from '../../../src/tools/types.js';

function fakeTool(name: string): Tool {
  return {
    name,
    description: `the ${name} tool`,
    parameters: z.object({ text: z.string() }),
    timeoutMs: 1000,
    execute: async () => ({ content: name }),
  };
}

describe('tool registry', () => {
  it('offers definitions in registration order and finds tools by name', () => {
    const alpha = fakeTool('alpha');
    const beta = fakeTool('beta-2');
    const registry = createToolRegistry([alpha, beta]);
    expect(registry.names()).toEqual(['alpha', 'beta-2']);
    expect(registry.definitions()).toEqual([
      { name: 'alpha', description: 'the alpha tool', parameters: alpha.parameters },
      { name: 'beta-2', description: 'the beta-2 tool', parameters: beta.parameters },
    ]);
    expect(registry.get('beta-2')).toBe(beta);
    expect(registry.get('gamma')).toBeUndefined();
  });

  it('hands out copies, so a caller cannot change the registry', () => {
    const registry = createToolRegistry([fakeTool('alpha')]);
    registry.definitions().pop();
    registry.names().pop();
    expect(registry.names()).toEqual(['alpha']);
    expect(registry.definitions()).toHaveLength(1);
  });

  it('refuses two tools of one name', () => {
    expect(() =>
      createToolRegistry([fakeTool('alpha'), fakeTool('beta'), fakeTool('alpha')]),
    ).toThrow(
      expect.objectContaining({
        code: 'duplicate_tool_name',
        message: 'two tools are named "alpha"',
      }),
    );
  });

  it('refuses a name the vendors would reject', () => {
    for (const name of ['', 'has space', 'dots.not.allowed', 'x'.repeat(65)]) {
      expect(() => createToolRegistry([fakeTool(name)]), name).toThrow(AppError);
    }
  });
});

describe('built-in tools', () => {
  it('without an http_fetch allowlist: ask_user, calculator and current_time', () => {
    const tools = builtinTools(loadConfig({}));
    expect(tools.map((tool) => tool.name)).toEqual(['ask_user', 'calculator', 'current_time']);
  });

  it('with an allowlist, http_fetch too, under the configured limits', () => {
    const config = loadConfig({
      HTTP_FETCH_ALLOWED_HOSTS: 'docs.example.com, *.wikipedia.org',
      HTTP_FETCH_TIMEOUT_MS: '5000',
    });
    expect(config.HTTP_FETCH_ALLOWED_HOSTS).toEqual(['docs.example.com', '*.wikipedia.org']);
    expect(config.HTTP_TOOLS_ALLOW_PRIVATE).toBe(false);
    expect(config.HTTP_FETCH_MAX_BYTES).toBe(1024 * 1024);
    expect(config.TOOL_OUTPUT_MAX_CHARS).toBe(20_000);
    const registry = createToolRegistry(builtinTools(config));
    expect(registry.names()).toEqual([...BUILTIN_TOOL_NAMES]);
    const httpFetch = registry.get('http_fetch');
    expect(httpFetch?.timeoutMs).toBe(6000);
    expect(httpFetch?.description).toContain('docs.example.com, *.wikipedia.org');
  });

  it('a bad allowlist entry is a configuration error', () => {
    expect(() => loadConfig({ HTTP_FETCH_ALLOWED_HOSTS: 'ok.example.com, http://bad' })).toThrow(
      'HTTP_FETCH_ALLOWED_HOSTS',
    );
  });

  it('every built-in turns into the JSON Schema object the vendors take', () => {
    const config = loadConfig({ HTTP_FETCH_ALLOWED_HOSTS: 'example.com' });
    for (const definition of createToolRegistry(builtinTools(config)).definitions()) {
      const schema = toolParametersJsonSchema(definition);
      expect(schema.type, definition.name).toBe('object');
      expect(definition.description.length, definition.name).toBeGreaterThan(20);
    }
  });
});
