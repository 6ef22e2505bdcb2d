import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/logger.js';
import { closeServices, createServices, type Services } from '../../src/services.js';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/store/embedded-postgres.js';
import { migrate, readMigrations } from '../../src/store/migrate.js';
import type { CreatedTenant } from '../../src/tenancy/issue.js';

/**
 * The plumbing every benchmark shares: stopping on Ctrl-C, undoing what was
 * started even after a failure, an embedded PostgreSQL in a temporary
 * folder, and the real services over it. Each benchmark keeps its options,
 * its measured loop and its summary.
 */

/** Undoes one thing a benchmark started. */
export type Cleanup = () => Promise<unknown>;

/**
 * Runs `body`, then its cleanups, then prints the summary. SIGINT and
 * SIGTERM abort the signal `body` gets; the cleanups still run after, so
 * PostgreSQL, which runs in its own process group and would otherwise
 * outlive us, is stopped. Failures of the body and of the cleanups are
 * thrown together.
 */
export async function runBenchmark<T>(
  name: string,
  body: (signal: AbortSignal, cleanups: Cleanup[]) => Promise<T>,
  printSummary: (result: T) => void,
): Promise<void> {
  const interrupt = new AbortController();
  const onSignal = () => interrupt.abort(new Error('interrupted'));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let result: T;
  try {
    result = await withCleanups(`bench ${name}`, (cleanups) => body(interrupt.signal, cleanups));
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  // Printed once everything is stopped, so the summary line really is the last one.
  printSummary(result);
}

/**
 * Runs `body`, then undoes what it pushed onto `cleanups` in reverse order,
 * each one even when the body or an earlier cleanup failed. One failure is
 * thrown as it is, several as an AggregateError "`label` failed".
 */
export async function withCleanups<T>(
  label: string,
  body: (cleanups: Cleanup[]) => Promise<T>,
): Promise<T> {
  const cleanups: Cleanup[] = [];
  const failures: unknown[] = [];
  let result: { value: T } | undefined;
  try {
    result = { value: await body(cleanups) };
  } catch (error) {
    failures.push(error);
  }
  for (const cleanup of cleanups.reverse()) {
    await cleanup().catch((error: unknown) => failures.push(error));
  }
  if (result && failures.length === 0) return result.value;
  if (failures.length === 1) throw failures[0];
  throw new AggregateError(failures, `${label} failed`);
}

/**
 * A fresh embedded PostgreSQL in a `waymark-bench-<label>-` temporary
 * folder; stopping it and removing the folder are pushed onto `cleanups`.
 */
export async function startBenchDatabase(
  cleanups: Cleanup[],
  label: string,
): Promise<EmbeddedPostgres> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `waymark-bench-${label}-`));
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const embedded = await startEmbeddedPostgres({
    dataDir,
    port: 0,
    // Not 'warn': pg's pool.end() resolves before the server has seen its
    // connections close, so the stop logs one FATAL "terminating
    // connection" per pooled connection. A failed start still throws with
    // PostgreSQL's own output.
    log: createLogger({ LOG_LEVEL: 'error' }),
  });
  cleanups.push(() => embedded.stop());
  return embedded;
}

export interface BenchServicesOptions {
  databaseUrl: string;
  /**
   * What the config is loaded from and provider keys are read from, as
   * main.ts uses the process environment; LOG_LEVEL is 'silent' unless set
   * here, so logging is not measured.
   */
  env?: NodeJS.ProcessEnv;
}

/** The real services over `databaseUrl`, closed by a cleanup; the database is used as it is. */
export async function createBenchServices(
  cleanups: Cleanup[],
  options: BenchServicesOptions,
): Promise<Services> {
  const env = { LOG_LEVEL: 'silent', ...options.env };
  const config = loadConfig(env);
  const services = createServices({
    config,
    log: createLogger(config),
    databaseUrl: options.databaseUrl,
    migrations: await readMigrations(),
    env,
  });
  cleanups.push(() => closeServices(services));
  return services;
}

/**
 * The real services over a fresh database, migrated, with the operator
 * tenant and its admin key that the first start bootstraps.
 */
export async function startBenchServices(
  cleanups: Cleanup[],
  options: BenchServicesOptions,
): Promise<{ services: Services; bootstrap: CreatedTenant }> {
  const services = await createBenchServices(cleanups, options);
  await migrate(services.database.pool, services.log, { migrations: services.migrations });
  const bootstrap = await services.tenancy.bootstrap();
  if (!bootstrap) throw new Error('the fresh database already had a tenant; no key was issued');
  return { services, bootstrap };
}
