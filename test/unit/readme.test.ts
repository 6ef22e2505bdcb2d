import { readdir, readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { configVariables } from '../../src/config.js';
import { EVENT_TYPES } from '../../src/workflows/types.js';

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
async function sourceFiles(folder: URL): Promise<URL[]> {
  const entries = await readdir(folder, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((entry) =>
      entry.isDirectory()
        ? sourceFiles(new URL(`${entry.name}/`, folder))
        : Promise.resolve(entry.name.endsWith('.ts') ? [new URL(entry.name, folder)] : []),
    ),
  );
  return nested.flat();
}

const tableRows = (text: string) => text.split('\n').filter((line) => line.startsWith('| `'));

describe('README', () => {
  it('documents every configuration variable in its table', () => {
    const documented = new Set(
      tableRows(readme).map((line) => /^\| `([A-Z0-9_]+)`/.exec(line)?.[1]),
    );
    expect(configVariables.filter((name) => !documented.has(name))).toEqual([]);
  });

  it('documents every event type in the events table', () => {
    const documented = new Set(tableRows(readme).map((line) => /^\| `([a-z_]+)`/.exec(line)?.[1]));
    expect(EVENT_TYPES.filter((type) => !documented.has(type))).toEqual([]);
  });

  it('documents every error code the service answers or fails a workflow with', async () => {
    const codes = new Set<string>();
    for (const file of await sourceFiles(new URL('../../src/', import.meta.url))) {
      const text = await readFile(file, 'utf8');
      // The error factories (errors.ts and the modules' own), and AppErrors built in place.
      for (const match of text.matchAll(
        /\b(?:badRequest|conflict|notFound|unauthorized|forbidden|invalid|refuse|notReady)\(\s*'([a-z_]+)'/g,
      )) {
        codes.add(match[1] as string);
      }
      for (const match of text.matchAll(/code: '([a-z_]+)',\s*status:/g))
        codes.add(match[1] as string);
    }
    // Reaches no client as a code: a tool's refused address becomes its error result's text.
    codes.delete('blocked_address');
    expect(codes.size).toBeGreaterThan(40);
    expect([...codes].filter((code) => !readme.includes(`\`${code}\``))).toEqual([]);
  });

  it('gives the two quick-start commands', () => {
    expect(readme).toContain('npm start');
    expect(readme).toContain('npm test');
  });
});
