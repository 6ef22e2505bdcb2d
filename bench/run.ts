import { execFileSync } from 'node:child_process';
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

/**
 * The benchmarks measure the service as `npm start` runs it: tsc's output,
 * built here first (~2.5 s), loaded in place of the sources they import
 * (support/use-built-service.mjs). Run from the sources, the service is
 * what tsx makes of them: esbuild's keepNames names every function as it
 * is created (an `Object.defineProperty` per closure, ~0.06 ms of the
 * service thread a workflow at concurrency 1 in a CPU profile), which
 * `npm start` does not do. Measured (2026-12-05): the service started
 * apart and driven with `--service-url`, `tsx src/main.ts` against
 * `node dist/main.js` in three alternated pairs, 386-396 against 426-444
 * workflows/s at concurrency 32 (that also weighs tsx's source maps); in
 * this process, six alternated pairs differed within the host's noise.
 * The load thread (clients and fake provider) runs its own code through
 * tsx.
 */
async function useBuiltService(): Promise<void> {
  // The project's one build (package.json `build`), as `npm start` is built.
  execFileSync('npm', ['run', '--silent', 'build'], {
    cwd: path.dirname(benchDir),
    stdio: 'inherit',
  });
  await import(pathToFileURL(path.join(benchDir, 'support/use-built-service.mjs')).href);
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
  await useBuiltService();
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
