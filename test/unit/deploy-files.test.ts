import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { configVariables } from '../../src/config.js';

/**
 * The deployment files are checked against the code they deploy. A variable
 * the service does not read is a typo that silently leaves a default in
 * place; a CMD naming a file the build no longer emits, a root user or a
 * health check calling a missing curl only show once a container runs.
 *
 * Each check returns the problems it finds, so the same function is run on
 * the real files (no problem expected) and on broken samples (proving that
 * it does catch them).
 */

const projectRoot = fileURLToPath(new URL('../../', import.meta.url));

function readProjectFile(file: string): string {
  return readFileSync(path.join(projectRoot, file), 'utf8');
}

// --- docker-compose.yml --------------------------------------------------

/** Names set by a compose `environment`: map form, or list form (`NAME=value`, or `NAME` alone). */
function environmentNames(environment: unknown): string[] {
  if (environment === undefined || environment === null) return [];
  if (Array.isArray(environment)) {
    return environment.map((entry) => {
      if (typeof entry !== 'string') throw new Error(`environment entry is not a string: ${entry}`);
      return entry.split('=', 1)[0]?.trim() ?? '';
    });
  }
  if (typeof environment === 'object') return Object.keys(environment);
  throw new Error(`environment must be a map or a list, got ${JSON.stringify(environment)}`);
}

/** `healthcheck.test` as one string, from its string or its list form. */
function healthcheckCommand(test: unknown): string {
  return Array.isArray(test) ? test.map(String).join(' ') : String(test ?? '');
}

/** A Waymark service: named `waymark`, or built from this repository. */
function isWaymarkService(name: string, service: Record<string, unknown>): boolean {
  const build = service.build;
  const context =
    typeof build === 'object' && build !== null ? (build as { context?: unknown }).context : build;
  return name === 'waymark' || context === '.' || context === './';
}

function composeProblems(compose: unknown): string[] {
  const services = (compose as { services?: Record<string, Record<string, unknown>> } | null)
    ?.services;
  if (!services) return ['the file has no services'];
  const known = new Set<string>(configVariables);
  const problems: string[] = [];
  const waymarkServices = Object.entries(services).filter(([name, service]) =>
    isWaymarkService(name, service),
  );
  if (waymarkServices.length === 0) problems.push('no waymark service');
  for (const [name, service] of waymarkServices) {
    if (service.env_file !== undefined) {
      problems.push(`${name}: env_file hides its variables from this check; use environment`);
    }
    for (const variable of environmentNames(service.environment)) {
      if (!known.has(variable)) {
        problems.push(`${name}: sets ${variable}, which src/config.ts does not read`);
      }
    }
    const healthcheck = service.healthcheck as { test?: unknown; disable?: boolean } | undefined;
    if (healthcheck?.test !== undefined) {
      problems.push(
        ...healthcheckProblems(`${name}: healthcheck`, healthcheckCommand(healthcheck.test)),
      );
    }
  }
  return problems;
}

function healthcheckProblems(what: string, command: string): string[] {
  const problems: string[] = [];
  if (!command.includes('/readyz')) problems.push(`${what} does not call /readyz`);
  // node:*-slim images have neither: the check would fail forever.
  if (/\b(curl|wget)\b/.test(command)) problems.push(`${what} needs curl or wget`);
  return problems;
}

// --- Dockerfile ------------------------------------------------------------

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  base: string;
  name: string | undefined;
  instructions: Instruction[];
}

/**
 * Instructions grouped by stage. Handles comments and `\` continuations;
 * not heredocs or a custom `# escape=` directive, which this repository's
 * Dockerfile does not use.
 */
function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  let pending = '';
  for (const line of text.split(/\r?\n/)) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    if (trimmed.endsWith('\\')) {
      pending += `${trimmed.slice(0, -1)} `;
      continue;
    }
    const whole = pending + trimmed;
    pending = '';
    const match = /^(\S+)\s*([\s\S]*)$/.exec(whole);
    if (!match?.[1]) continue;
    const keyword = match[1].toUpperCase();
    const args = match[2]?.trim() ?? '';
    if (keyword === 'FROM') {
      const words = args.split(/\s+/).filter((word) => !word.startsWith('--'));
      const asIndex = words.findIndex((word) => word.toUpperCase() === 'AS');
      stages.push({
        base: words[0] ?? '',
        name: asIndex >= 0 ? words[asIndex + 1] : undefined,
        instructions: [],
      });
    } else {
      // Instructions before the first FROM are global ARGs; they set nothing at run time.
      stages.at(-1)?.instructions.push({ keyword, args });
    }
  }
  return stages;
}

/** A stage's instructions, after those of the earlier stage it is built `FROM`, if any. */
function inheritedInstructions(stages: Stage[], index: number): Instruction[] {
  const stage = stages[index];
  if (!stage) return [];
  const parent = stages.findIndex((other, i) => i < index && other.name === stage.base);
  return [...(parent >= 0 ? inheritedInstructions(stages, parent) : []), ...stage.instructions];
}

function lastArgs(instructions: Instruction[], keyword: string): string | undefined {
  return instructions.findLast((instruction) => instruction.keyword === keyword)?.args;
}

/** Exec form (a JSON array) as is; shell form split on blanks, enough to find `node <script>`. */
function commandWords(args: string | undefined): string[] {
  if (args === undefined) return [];
  if (args.startsWith('[')) {
    const parsed: unknown = JSON.parse(args);
    if (!Array.isArray(parsed)) throw new Error(`not a JSON array: ${args}`);
    return parsed.map(String);
  }
  return args.split(/\s+/);
}

/** The script `node` runs: the first word after `node` that is not an option. */
function nodeScript(words: string[]): string | undefined {
  const nodeAt = words.findIndex((word) => path.posix.basename(word) === 'node');
  if (nodeAt < 0) return undefined;
  return words.slice(nodeAt + 1).find((word) => !word.startsWith('-'));
}

/** Where the build writes its output and reads its sources, relative to the project root. */
interface BuildLayout {
  outDir: string;
  rootDir: string;
}

interface DockerfileCheckOptions {
  layout: BuildLayout;
  /** Whether a file (relative to the project root) exists. */
  exists(file: string): boolean;
}

function dockerfileProblems(text: string, options: DockerfileCheckOptions): string[] {
  const stages = parseDockerfile(text);
  if (stages.length === 0) return ['no FROM'];
  const runtime = inheritedInstructions(stages, stages.length - 1);
  return [
    ...commandProblems(runtime, options),
    ...userProblems(runtime),
    ...healthcheckInstructionProblems(runtime),
  ];
}

function commandProblems(runtime: Instruction[], options: DockerfileCheckOptions): string[] {
  const words = [
    ...commandWords(lastArgs(runtime, 'ENTRYPOINT')),
    ...commandWords(lastArgs(runtime, 'CMD')),
  ];
  if (words.length === 0) return ['the final stage has no CMD or ENTRYPOINT'];
  const script = nodeScript(words);
  if (!script) return [`the command ${JSON.stringify(words)} does not run a script with node`];

  const workdir = runtime
    .filter((instruction) => instruction.keyword === 'WORKDIR')
    .reduce((dir, instruction) => path.posix.resolve(dir, instruction.args), '/');
  const inImage = path.posix.relative(workdir, path.posix.resolve(workdir, script));
  const { outDir, rootDir } = options.layout;
  const inOutDir = path.posix.relative(outDir, inImage);
  if (inOutDir.startsWith('..') || path.posix.isAbsolute(inOutDir)) {
    return [`the command runs ${inImage}, outside the build's outDir ${outDir}`];
  }
  const problems: string[] = [];
  const source = path.posix.join(rootDir, inOutDir.replace(/\.(c|m)?js$/, '.$1ts'));
  if (!options.exists(source)) {
    problems.push(`the command runs ${inImage}, built from ${source}, which does not exist`);
  }
  const copiesOutDir = runtime.some((instruction) => {
    if (instruction.keyword !== 'COPY' || !instruction.args.startsWith('--from=')) return false;
    const destination = instruction.args.split(/\s+/).at(-1) ?? '';
    return path.posix.resolve(workdir, destination) === path.posix.resolve(workdir, outDir);
  });
  if (!copiesOutDir) {
    problems.push(`the final stage does not COPY --from a build stage into ${workdir}/${outDir}`);
  }
  return problems;
}

function userProblems(runtime: Instruction[]): string[] {
  const user = lastArgs(runtime, 'USER');
  if (user === undefined) return ['the final stage sets no USER, so it runs as root'];
  const name = user.split(':')[0];
  return name === 'root' || name === '0' ? [`the final stage runs as ${user}`] : [];
}

function healthcheckInstructionProblems(runtime: Instruction[]): string[] {
  const healthcheck = lastArgs(runtime, 'HEALTHCHECK');
  if (healthcheck === undefined || healthcheck.toUpperCase() === 'NONE') {
    return ['the final stage has no HEALTHCHECK'];
  }
  return healthcheckProblems('HEALTHCHECK', healthcheck);
}

/** outDir and rootDir of the tsconfig that `npm run build` compiles with, following `extends`. */
function readBuildLayout(): BuildLayout {
  const manifest = JSON.parse(readProjectFile('package.json')) as { scripts?: { build?: string } };
  const build = manifest.scripts?.build ?? '';
  const project = /(?:-p|--project)\s+(\S+)/.exec(build)?.[1];
  if (!project) throw new Error(`the build script names no tsconfig (-p): "${build}"`);
  const outDir = compilerOption(project, 'outDir');
  const rootDir = compilerOption(project, 'rootDir');
  if (!outDir || !rootDir) throw new Error(`${project} must set both outDir and rootDir`);
  return { outDir, rootDir };
}

/** A path option of a tsconfig, relative to the project root; undefined when unset. */
function compilerOption(configFile: string, option: string): string | undefined {
  const config = JSON.parse(readProjectFile(configFile)) as {
    extends?: string;
    compilerOptions?: Record<string, unknown>;
  };
  const value = config.compilerOptions?.[option];
  if (typeof value === 'string') {
    return path.posix.normalize(path.posix.join(path.posix.dirname(configFile), value));
  }
  if (!config.extends) return undefined;
  return compilerOption(path.posix.join(path.posix.dirname(configFile), config.extends), option);
}

const layout: BuildLayout = { outDir: 'dist', rootDir: 'src' };
const alwaysExists = () => true;

describe('docker-compose.yml', () => {
  it('sets on waymark only variables that src/config.ts reads, with a /readyz healthcheck', () => {
    expect(composeProblems(parseYaml(readProjectFile('docker-compose.yml')))).toEqual([]);
  });

  it('an unknown variable is caught in the map form and in the list form', () => {
    const compose = {
      services: {
        waymark: { build: '.', environment: { PORT: '8080', LOGLEVEL: 'debug' } },
        worker: {
          build: { context: '.' },
          environment: ['HOST=0.0.0.0', 'DATABASE_URI=x', 'PGHOST'],
        },
        postgres: { image: 'postgres:17', environment: { POSTGRES_DB: 'waymark' } },
      },
    };
    expect(composeProblems(compose)).toEqual([
      'waymark: sets LOGLEVEL, which src/config.ts does not read',
      'worker: sets DATABASE_URI, which src/config.ts does not read',
      'worker: sets PGHOST, which src/config.ts does not read',
    ]);
  });

  it('a missing waymark service, an env_file or a curl healthcheck is caught', () => {
    expect(composeProblems({ services: { postgres: { image: 'postgres:17' } } })).toEqual([
      'no waymark service',
    ]);
    const compose = {
      services: {
        waymark: {
          env_file: '.env',
          healthcheck: { test: 'curl -f http://localhost:8080/healthz' },
        },
      },
    };
    expect(composeProblems(compose)).toEqual([
      'waymark: env_file hides its variables from this check; use environment',
      'waymark: healthcheck does not call /readyz',
      'waymark: healthcheck needs curl or wget',
    ]);
  });
});

describe('Dockerfile', () => {
  it('the build layout is read from the tsconfig `npm run build` uses', () => {
    expect(readBuildLayout()).toEqual({ outDir: 'dist', rootDir: 'src' });
  });

  it('runs a built file whose source exists, as a non-root user, health-checked on /readyz', () => {
    const problems = dockerfileProblems(readProjectFile('Dockerfile'), {
      layout: readBuildLayout(),
      exists: (file) => existsSync(path.join(projectRoot, file)),
    });
    expect(problems).toEqual([]);
  });

  it('a command naming a file without a source is caught', () => {
    const dockerfile = `
      FROM node:20 AS build
      WORKDIR /app
      RUN npm run build
      FROM node:20-slim
      WORKDIR /app
      COPY --from=build /app/dist ./dist
      USER node
      HEALTHCHECK CMD ["node", "-e", "fetch('http://127.0.0.1:8080/readyz')"]
      CMD ["node", "--enable-source-maps", "dist/server.js"]
    `;
    const exists = (file: string) => file === 'src/main.ts';
    expect(dockerfileProblems(dockerfile, { layout, exists })).toEqual([
      'the command runs dist/server.js, built from src/server.ts, which does not exist',
    ]);
  });

  it('npm start, root, a missing healthcheck and an uncopied outDir are caught', () => {
    const npmStart = `
      FROM node:20-slim AS runtime
      WORKDIR /app
      COPY . .
      USER root
      CMD npm start
    `;
    expect(dockerfileProblems(npmStart, { layout, exists: alwaysExists })).toEqual([
      'the command ["npm","start"] does not run a script with node',
      'the final stage runs as root',
      'the final stage has no HEALTHCHECK',
    ]);
    const uncopied = `
      FROM node:20-slim
      WORKDIR /srv
      USER 0:0
      HEALTHCHECK --interval=5s \\
        CMD wget -qO- http://127.0.0.1:8080/readyz
      ENTRYPOINT ["node"]
      CMD ["dist/main.js"]
    `;
    expect(dockerfileProblems(uncopied, { layout, exists: alwaysExists })).toEqual([
      'the final stage does not COPY --from a build stage into /srv/dist',
      'the final stage runs as 0:0',
      'HEALTHCHECK needs curl or wget',
    ]);
  });

  it('only the final stage counts, with what it inherits from an earlier stage', () => {
    const dockerfile = `
      FROM node:20 AS build
      USER node
      CMD ["node", "dist/main.js"]
      FROM node:20-slim AS base
      WORKDIR /app
      USER node
      HEALTHCHECK CMD ["node", "-e", "fetch('http://127.0.0.1:8080/readyz')"]
      FROM base
      COPY --from=build /app/dist dist
      CMD ["node", "dist/main.js"]
    `;
    expect(dockerfileProblems(dockerfile, { layout, exists: alwaysExists })).toEqual([]);
    const rootRuntime = `${dockerfile}\n      USER root\n`;
    expect(dockerfileProblems(rootRuntime, { layout, exists: alwaysExists })).toEqual([
      'the final stage runs as root',
    ]);
    const noCommand = dockerfile.replace(/CMD \["node", "dist\/main.js"\]\s*$/, '');
    expect(dockerfileProblems(noCommand, { layout, exists: alwaysExists })).toEqual([
      'the final stage has no CMD or ENTRYPOINT',
    ]);
  });
});
