import { randomUUID } from 'node:crypto';
import { bearer, type TestApp } from './app.js';
import type { ToolServer } from './tool-server.js';

/** Helpers for tests of the tools API: a weather tool on the local tool server, registered through it. */

/** The weather tool's Authorization header: stored, never shown. */
export const SECRET = 'Bearer very-secret-token-4711';

export const weatherParameters = {
  type: 'object',
  properties: { city: { type: 'string', description: 'City name' } },
  required: ['city'],
};

/**
 * The keys of a tools API test: the bootstrap's tenant with its admin key
 * and a member key of it, and another tenant's admin key.
 */
export async function tenantKeys(testApp: TestApp) {
  const created = await testApp.services.tenancy.bootstrap();
  if (!created) throw new Error('bootstrap created nothing on an empty database');
  const tenantId = created.tenant.id;
  const member = await testApp.services.tenancy.issueKey(tenantId, {
    name: 'member',
    scopes: ['member'],
  });
  const other = await testApp.services.tenancy.createTenant({ name: 'other' });
  return {
    tenantId,
    adminKey: created.adminKey.secret,
    memberKey: member.secret,
    otherTenantKey: other.adminKey.secret,
  };
}

export interface ToolsApiContext {
  testApp: TestApp;
  server: ToolServer;
  adminKey: string;
}

/**
 * Helpers over the test file's app, tool server and admin key, which are
 * read when the helpers are called: the file's beforeAll sets them up.
 */
export function toolsApiHelpers(context: () => ToolsApiContext) {
  /** The weather tool under a fresh name; `overrides` replace its fields. */
  function toolBody(overrides: Record<string, unknown> = {}) {
    return {
      name: `weather_${randomUUID().slice(0, 8)}`,
      description: 'Current weather of a city',
      parameters: weatherParameters,
      url: `${context().server.origin}/weather`,
      headers: { Authorization: SECRET, 'X-Team': 'core' },
      ...overrides,
    };
  }

  /** Registers a tool on the file's app with its admin key, unless told otherwise. */
  async function createTool(
    payload: Record<string, unknown>,
    options: { app?: TestApp; key?: string } = {},
  ) {
    const { testApp, adminKey } = context();
    return (options.app ?? testApp).app.inject({
      method: 'POST',
      url: '/v1/tools',
      headers: bearer(options.key ?? adminKey),
      payload,
    });
  }

  return { toolBody, createTool };
}

/** An answer over a real socket: its status, content type, text and parsed JSON body. */
export interface JsonReply {
  status: number;
  contentType: string | null;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: assertions on the JSON bodies are the type check.
  json: any;
}

/** A request over a real socket to an app listening at `base` (listenLocally); `body` is sent as JSON. */
export async function callJson(
  base: string,
  request: { key: string; method: string; path: string; body?: unknown },
): Promise<JsonReply> {
  const response = await fetch(`${base}${request.path}`, {
    method: request.method,
    headers: {
      ...bearer(request.key),
      ...(request.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(request.body === undefined ? {} : { body: JSON.stringify(request.body) }),
  });
  const text = await response.text();
  return {
    status: response.status,
    contentType: response.headers.get('content-type'),
    text,
    json: text ? JSON.parse(text) : undefined,
  };
}
