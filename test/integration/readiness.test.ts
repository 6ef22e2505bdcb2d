import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { closeServices, createServices, type Services } from '../../src/services.js';
import { migrate, readMigrations } from '../../src/store/migrate.js';
import { createTestDatabase } from '../support/database.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function appOver(
  databaseUrl: string,
  options: { holdReadiness?: boolean } = {},
): Promise<{ services: Services; readyz: () => Promise<Response> }> {
  const services = createServices({
    config: loadConfig({ LOG_LEVEL: 'silent' }),
    log: pino({ level: 'silent' }),
    databaseUrl,
    migrations: await readMigrations(),
    holdReadiness: options.holdReadiness,
  });
  const app = await buildApp(services);
  await app.ready();
  cleanups.push(async () => {
    await app.close();
    await closeServices(services);
  });
  return {
    services,
    readyz: async () => {
      const response = await app.inject({ method: 'GET', url: '/readyz' });
      return new Response(response.body, {
        status: response.statusCode,
        headers: { 'content-type': String(response.headers['content-type']) },
      });
    },
  };
}

describe('/readyz', () => {
  it('is 503 starting until the process has started (main.ts completes it after the bootstrap key)', async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const { services, readyz } = await appOver(database.url, { holdReadiness: true });
    const before = await readyz();
    expect(before.status).toBe(503);
    expect(((await before.json()) as { code: string }).code).toBe('starting');
    services.startup.complete();
    expect((await readyz()).status).toBe(200);
  });

  it('is 503 migrations_pending on an unmigrated database and 200 once migrated', async () => {
    const database = await createTestDatabase({ migrated: false });
    cleanups.push(() => database.drop());
    const { services, readyz } = await appOver(database.url);
    const before = await readyz();
    expect(before.status).toBe(503);
    expect(before.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(((await before.json()) as { code: string }).code).toBe('migrations_pending');
    await migrate(services.database.pool, services.log);
    expect((await readyz()).status).toBe(200);
  });

  it('stays 200 once a newer release has migrated the database (a rolling upgrade: replicas of both releases run side by side)', async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const { services, readyz } = await appOver(database.url);
    expect((await readyz()).status).toBe(200);
    const next = services.migrations.length + 1;
    await services.database.pool.query(
      'INSERT INTO waymark_migrations (id, name, checksum) VALUES ($1, $2, $3)',
      [next, `${String(next).padStart(4, '0')}_from_a_newer_release.sql`, 'x'],
    );
    const response = await readyz();
    expect(response.status, await response.clone().text()).toBe(200);
  });

  it('is 503 migrations_pending while a migration this build knows is missing, newer ones besides', async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const { services, readyz } = await appOver(database.url);
    const known = services.migrations.length;
    // Two from a newer release, and the last of this build's taken out: more rows than the
    // build knows and a higher id, yet one of its own missing.
    await services.database.pool.query(
      `INSERT INTO waymark_migrations (id, name, checksum)
       VALUES ($1, 'newer_one.sql', 'x'), ($2, 'newer_two.sql', 'x')`,
      [known + 1, known + 2],
    );
    await services.database.pool.query('DELETE FROM waymark_migrations WHERE id = $1', [known]);
    const response = await readyz();
    expect(response.status).toBe(503);
    expect(((await response.json()) as { code: string }).code).toBe('migrations_pending');
  });

  it('is 503 database_unavailable when the database does not answer', async () => {
    const { readyz } = await appOver('postgres://nobody:wrong@127.0.0.1:1/none');
    const response = await readyz();
    expect(response.status).toBe(503);
    const problem = (await response.json()) as { code: string };
    expect(problem.code).toBe('database_unavailable');
    expect(JSON.stringify(problem)).not.toContain('wrong');
  });
});
