import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * `npm run bench -- <name> [options]` runs `bench/<name>/index.ts`, which
 * exports `run(args)`; the options after the name are passed to it. Without
 * a name, or with an unknown one, it lists the benchmarks there are.
 */

const benchDir = path.dirname(fileURLToPath(import.meta.url));
// Names are folder names, never paths: `npm run bench -- ../src` finds nothing.
const NAME_PATTERN = /^[a-z0-9][a-z0-9-]*$/;

interface BenchmarkModule {
  run(args: string[]): Promise<void>;
}

async function availableBenchmarks(): Promise<string[]> {
  const entries = await readdir(benchDir, { withFileTypes: true });
  return entries
    .filter((entry) => entry.isDirectory() && NAME_PATTERN.test(entry.name))
    .filter((entry) => existsSync(path.join(benchDir, entry.name, 'index.ts')))
    .map((entry) => entry.name)
    .sort();
}

function isBenchmarkModule(loaded: unknown): loaded is BenchmarkModule {
  return typeof (loaded as Partial<BenchmarkModule> | null)?.run === 'function';
}

async function main(): Promise<number> {
  const [name, ...args] = process.argv.slice(2);
  const names = await availableBenchmarks();
  const listing = `benchmarks: ${names.join(', ') || '(none)'}\nusage: npm run bench -- <name> [options]`;
  if (name === undefined) {
    process.stdout.write(`${listing}\n`);
    return 0;
  }
  if (!names.includes(name)) {
    process.stderr.write(`unknown benchmark "${name}"\n${listing}\n`);
    return 1;
  }
  const file = path.join(benchDir, name, 'index.ts');
  const loaded: unknown = await import(pathToFileURL(file).href);
  if (!isBenchmarkModule(loaded)) {
    process.stderr.write(`${path.relative(process.cwd(), file)} does not export run(args)\n`);
    return 1;
  }
  await loaded.run(args);
  return 0;
}

// exitCode, not exit(): the process ends once the benchmark has closed
// everything it opened, so a leaked handle shows up as a hang, not as luck.
process.exitCode = await main();
