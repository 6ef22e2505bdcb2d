import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { configVariables } from '../../src/config.js';
import { EVENT_TYPES } from '../../src/workflows/types.js';

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
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

  it('gives the two quick-start commands', () => {
    expect(readme).toContain('npm start');
    expect(readme).toContain('npm test');
  });
});
