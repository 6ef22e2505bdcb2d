/**
 * Regenerates openapi/openapi.json from the routes' zod schemas:
 * `npm run openapi`. Building the app opens no database connection (the
 * pool connects on its first query), so no database is needed.
 */
import { writeFile } from 'node:fs/promises';
import pino from 'pino';
import { loadConfig } from '../src/config.js';
import { buildApp } from '../src/http/app.js';
import { formatOpenApiDocument } from '../src/http/openapi.js';
import { closeServices, createServices } from '../src/services.js';

const services = createServices({
  config: loadConfig({ LOG_LEVEL: 'silent' }),
  log: pino({ level: 'silent' }),
  databaseUrl: 'postgres://unused@127.0.0.1:1/unused',
  migrations: [],
});
const app = await buildApp(services);
await app.ready();
const target = new URL('../openapi/openapi.json', import.meta.url);
await writeFile(target, formatOpenApiDocument(app.swagger()));
await app.close();
await closeServices(services);
process.stdout.write(`wrote ${target.pathname}\n`);
