import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { LightMyRequestResponse } from 'fastify';

/**
 * Checks real responses against the committed openapi/openapi.json: the
 * status is documented for the operation, the content type is one the
 * document names for it, and a JSON body validates against its schema.
 */

interface OperationResponses {
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
}

const document = JSON.parse(
  readFileSync(new URL('../../openapi/openapi.json', import.meta.url), 'utf8'),
) as { paths: Record<string, Record<string, OperationResponses>> };

const ajv = new Ajv2020({ strict: false, allErrors: true });
// ajv-formats is CommonJS: its module object is the plugin under Node's ESM interop.
(addFormats as unknown as (instance: Ajv2020) => void)(ajv);
ajv.addSchema({ ...document, $id: 'openapi' });

/** What is wrong with a response against the document; [] when it conforms. */
export function openApiProblems(
  method: string,
  path: string,
  response: LightMyRequestResponse,
): string[] {
  const operation = document.paths[path]?.[method.toLowerCase()];
  if (!operation) return [`${method} ${path} is not documented`];
  const status = String(response.statusCode);
  const documented = operation.responses[status];
  if (!documented) {
    const listed = Object.keys(operation.responses).join(',');
    return [
      `${method} ${path} answered ${status} (${response.body.slice(0, 200)}), not among ${listed}`,
    ];
  }
  if (!documented.content) return [];
  const contentType =
    String(response.headers['content-type'] ?? '')
      .split(';')[0]
      ?.trim() ?? '';
  if (!(contentType in documented.content)) {
    const listed = Object.keys(documented.content).join(',');
    return [`${method} ${path} ${status}: content type ${contentType} is not among ${listed}`];
  }
  if (contentType === 'text/event-stream') return [];
  const escapedPath = path.replaceAll('~', '~0').replaceAll('/', '~1');
  const pointer = `openapi#/paths/${escapedPath}/${method.toLowerCase()}/responses/${status}/content/${contentType.replaceAll('/', '~1')}/schema`;
  const validate = ajv.getSchema(pointer) ?? ajv.compile({ $ref: pointer });
  if (validate(response.json())) return [];
  return (validate.errors ?? []).map(
    (error) =>
      `${method} ${path} ${status}: ${error.instancePath} ${error.message} ${JSON.stringify(error.params)}`,
  );
}
