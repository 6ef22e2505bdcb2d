import http from 'node:http';
import { benchQuestion } from './provider.js';

/**
 * The client side of bench/simple-path: each workflow is one
 * `POST /v1/workflows` with `Accept: text/event-stream`, whose response is
 * the new workflow's event stream, read until its `workflow_end` frame. Its
 * wall time runs from sending the request to parsing that frame.
 */

export interface ServiceTarget {
  /**
   * e.g. `http://127.0.0.1:8080`; several replicas of one service (one
   * PostgreSQL, one tenant) take the workflows in turn.
   */
  baseUrls: string[];
  apiKey: string;
  /** Catalogue name the workflows ask for; undefined leaves the choice to the service. */
  model: string | undefined;
  /** Set: each workflow's POST carries `Idempotency-Key: <prefix>-<n>` (`--idempotency-keys`). */
  idempotencyKeyPrefix?: string;
  /**
   * Set: each client loop runs its workflows in a session of its own, and
   * starts a new one (`POST /v1/sessions`, outside the workflows' timing)
   * after this many (`--session-turns`).
   */
  sessionTurns?: number;
}

export interface WorkflowRun {
  /** The number in the workflow's question. */
  n: number;
  /** `performance.now()` of the client's thread when the request was sent. */
  startedAt: number;
  wallMs: number;
}

export interface LoadOptions {
  target: ServiceTarget;
  agent: http.Agent;
  /** Workflow numbers `first` .. `first + count - 1`, so every question of a run is distinct. */
  first: number;
  count: number;
  concurrency: number;
  signal: AbortSignal;
}

/**
 * Runs `count` workflows from `concurrency` loops, each starting its next
 * one when the last ended. The first failure stops every loop and is
 * thrown once they have all stopped.
 */
export async function runWorkflows(
  options: LoadOptions,
): Promise<{ runs: WorkflowRun[]; elapsedMs: number }> {
  const runs: WorkflowRun[] = [];
  const failed = new AbortController();
  const signal = AbortSignal.any([options.signal, failed.signal]);
  const urls = options.target.baseUrls.map((baseUrl) => new URL('/v1/workflows', baseUrl));
  let next = 0;
  const loop = async (): Promise<void> => {
    let session: { id: string; turns: number } | undefined;
    while (!signal.aborted) {
      const index = next++;
      if (index >= options.count) return;
      const n = options.first + index;
      try {
        // Not aborted mid-flight: an interrupt lets the workflows in flight
        // finish (milliseconds), then every loop stops here.
        const url = urls[n % urls.length] as URL;
        const turns = options.target.sessionTurns;
        if (turns !== undefined && (!session || session.turns >= turns)) {
          session = { id: await createSession(url, options), turns: 0 };
        }
        if (session) session.turns += 1;
        runs.push({ n, ...(await runWorkflow(url, options, { n, sessionId: session?.id })) });
      } catch (error) {
        failed.abort(error);
        return;
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: options.concurrency }, loop));
  const elapsedMs = performance.now() - started;
  if (signal.aborted) throw signal.reason;
  return { runs, elapsedMs };
}

const END_FRAME = 'event: workflow_end\n';

/** A new session of the target's tenant, on the service at `workflowsUrl`; resolves with its id. */
async function createSession(
  workflowsUrl: URL,
  options: Pick<LoadOptions, 'target' | 'agent'>,
): Promise<string> {
  const { status, body } = await new Promise<{ status: number | undefined; body: string }>(
    (resolve, reject) => {
      const request = http.request(
        new URL('/v1/sessions', workflowsUrl),
        {
          method: 'POST',
          agent: options.agent,
          headers: {
            authorization: `Bearer ${options.target.apiKey}`,
            'content-type': 'application/json',
          },
        },
        (response) => {
          response.setEncoding('utf8');
          let text = '';
          response.on('data', (chunk: string) => {
            text += chunk;
          });
          response.once('end', () => resolve({ status: response.statusCode, body: text }));
          response.once('error', reject);
        },
      );
      request.once('error', reject);
      request.end('{}');
    },
  );
  if (status !== 201)
    throw new Error(`POST /v1/sessions answered ${status}: ${body.slice(0, 500)}`);
  return (JSON.parse(body) as { id: string }).id;
}

/** One workflow, streamed; resolves with its start and wall time once `workflow_end` says it completed. */
function runWorkflow(
  url: URL,
  options: Pick<LoadOptions, 'target' | 'agent'>,
  workflow: { n: number; sessionId: string | undefined },
): Promise<Omit<WorkflowRun, 'n'>> {
  const { target, agent } = options;
  const { n, sessionId } = workflow;
  const body = JSON.stringify({
    input: benchQuestion(n),
    mode: 'simple',
    tools: ['calculator'],
    ...(target.model ? { model: target.model } : {}),
    ...(sessionId ? { sessionId } : {}),
  });
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const request = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          authorization: `Bearer ${target.apiKey}`,
          accept: 'text/event-stream',
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...(target.idempotencyKeyPrefix === undefined
            ? {}
            : { 'idempotency-key': `${target.idempotencyKeyPrefix}-${n}` }),
        },
      },
      (response) => {
        response.setEncoding('utf8');
        let buffer = '';
        let wallMs: number | undefined;
        let failure: Error | undefined;
        response.on('data', (chunk: string) => {
          if (wallMs !== undefined || failure) return;
          buffer += chunk;
          if (response.statusCode !== 200) return;
          const at = buffer.indexOf(END_FRAME);
          if (at === -1) {
            // Only the frame in progress matters; the rest is read and dropped.
            const last = buffer.lastIndexOf('\n\n');
            if (last !== -1) buffer = buffer.slice(last + 2);
            return;
          }
          const frameEnd = buffer.indexOf('\n\n', at);
          if (frameEnd === -1) return;
          const timeAt = performance.now();
          const data = /\ndata: (.*)/.exec(buffer.slice(at, frameEnd))?.[1] ?? '{}';
          const end = JSON.parse(data) as { status?: unknown; detail?: unknown };
          if (end.status === 'completed') wallMs = timeAt - started;
          else failure = new Error(`workflow ${n} ended ${String(end.status)}: ${data}`);
        });
        // The stream ends after workflow_end; reading it to the end frees the keep-alive socket.
        response.once('end', () => {
          if (failure) return reject(failure);
          if (wallMs !== undefined) return resolve({ startedAt: started, wallMs });
          const status = response.statusCode;
          reject(
            new Error(
              status === 200
                ? `workflow ${n}: the event stream ended without workflow_end`
                : `POST /v1/workflows answered ${status}: ${buffer.slice(0, 500)}`,
            ),
          );
        });
        response.once('error', reject);
      },
    );
    request.once('error', reject);
    request.end(body);
  });
}
