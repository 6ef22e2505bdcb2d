import { randomBytes, randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import Fastify from 'fastify';
import type OpenAI from 'openai';
import type {
  ChatCompletionChunk,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import pg from 'pg';
import pino from 'pino';
import { serializeFrame } from '../../src/http/sse-frames.js';
import { convertRequest } from '../../src/llm/openai/convert-messages.js';
import { createOpenAiClient } from '../../src/llm/openai/create-client.js';
import { createProviderFetch, providerBody } from '../../src/llm/provider-fetch.js';
import { SseDecoder } from '../../src/llm/sse-decoder.js';
import { createLogger } from '../../src/logger.js';
import { buildSystemPrompt } from '../../src/orchestrator/system-prompt.js';
import { EVENTS_CHANNEL, encodeEvents } from '../../src/store/event-statement-parts.js';
import { migrate, readMigrations } from '../../src/store/migrate.js';
import type { NewEventRow } from '../../src/store/workflow-events.js';
import { calculatorTool } from '../../src/tools/builtins/calculator.js';
import { createToolRegistry } from '../../src/tools/registry.js';
import { wrapUntrustedOutput } from '../../src/tools/untrusted-output.js';
import { toEvent } from '../../src/workflows/rows.js';
import type { EventStatus, EventType, WorkflowEvent } from '../../src/workflows/types.js';
import { type Cleanup, startBenchDatabase } from '../support/harness.js';
import type { ServiceTarget } from './workload.js';

/**
 * `--floor`: what the parts the issue requires cost on their own, with none
 * of Waymark's layers on the path (only its pure pieces: the request body,
 * the calculator, the events' encoding and the SSE frames, so the bytes on
 * the wire are the same, and the decoder of the model's streamed answer).
 * Per workflow it does the simple path's work with those parts alone: a
 * Fastify route answering
 * `POST /v1/workflows` as an SSE stream, the OpenAI SDK's two streamed
 * calls through Waymark's provider fetch (the same request bodies, the
 * answers read as Waymark's adapter reads them), and
 * PostgreSQL's three statements of the same shape on the same schema (the
 * insert; the first turn with its events and NOTIFY, without the WAL flush
 * wait; the durable end), overlapped with the model calls as Waymark
 * overlaps them. It leaves out what Waymark adds around them: auth, rate
 * limits, validation, idempotency, budgets, the context window, the tool
 * registry and guard, the router (retries, fallback, circuit breaker,
 * usage ledger), the tracker's ordering and fan-out (LISTEN), leases and
 * logging. It writes each workflow's statements alone, where Waymark's
 * writes share statements under load (store/statement-batches.ts). At
 * concurrency 1, where Waymark's go alone too, the difference between its
 * figures and Waymark's is what those layers cost. Not a service: no error
 * handling beyond failing the stream.
 */

const API_KEY = `floor-${randomBytes(12).toString('hex')}`;
const ORIGIN = randomUUID();
const FLOOR_MODEL_ID = 'bench-model';
const NO_ABORT = new AbortController().signal;

const INSERT = `INSERT INTO workflows (id, tenant_id, status, mode, model, input, tools, metadata, lease_owner, lease_expires_at)
  VALUES ($1, $2, 'queued', $3, $4, $5, $6, '{}', $7, now() + interval '30 seconds')
  RETURNING created_at, (SELECT endpoints_version FROM tenants WHERE id = $2) AS endpoints_version`;

/** A transition with its turn, its events and the NOTIFY, in one statement, as Waymark's. */
function transition(end: boolean): string {
  return `WITH changed AS (
    UPDATE workflows SET status = $1, version = version + 1, updated_at = now(),
      started_at = coalesce(started_at, now()), kind = 'simple',
      finished_at = ${end ? 'now()' : 'finished_at'},
      lease_owner = ${end ? 'NULL' : 'lease_owner'}, lease_expires_at = ${end ? 'NULL' : 'lease_expires_at'},
      result = ${end ? '$9::jsonb' : 'coalesce($9::jsonb, result)'},
      input_tokens = input_tokens + $2, output_tokens = output_tokens + $3, last_seq = last_seq + $4
    WHERE id = $5 AND tenant_id = $6 AND status = ANY(${end ? `'{running}'` : `'{queued,running}'`}::text[])
    RETURNING *
  ), write_1 AS (
    INSERT INTO workflow_turns (workflow_id, tenant_id, turn, state)
    SELECT changed.id, changed.tenant_id, ${end ? 2 : 1}, $7::jsonb FROM changed
  ), inserted AS (
    INSERT INTO workflow_events (workflow_id, tenant_id, seq, type, step, status, detail, ts, elapsed_ms)
    SELECT changed.id, changed.tenant_id, changed.last_seq - $4 + e.i, e.type, e.step, e.status, e.detail, $10::timestamptz, e.elapsed_ms
    FROM changed, jsonb_to_recordset($8::jsonb)
      AS e(i integer, type text, step text, status text, detail jsonb, elapsed_ms integer)
  ), notified AS (
    SELECT pg_notify('${EVENTS_CHANNEL}', json_build_object('k', 'e', 'w', changed.id, 's', changed.last_seq, 'o', '${ORIGIN}')::text)
    FROM changed
  )
  SELECT changed.* FROM changed, notified${end ? '' : `, (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode`}`;
}
const TURN = transition(false);
const END = transition(true);

/** Starts the floor over a fresh embedded PostgreSQL; what it started is undone by `cleanups`. */
export async function startFloorService(
  cleanups: Cleanup[],
  options: { providerUrl: string },
): Promise<ServiceTarget> {
  const embedded = await startBenchDatabase(cleanups, 'simple-path-floor');
  const pool = new pg.Pool({ connectionString: embedded.url, max: 10 });
  // An idle connection ending as the database stops must not fail the process.
  pool.on('error', () => {});
  cleanups.push(() => pool.end());
  await migrate(pool, createLogger({ LOG_LEVEL: 'silent' }), {
    migrations: await readMigrations(),
  });
  const tenantId = randomUUID();
  await pool.query(`INSERT INTO tenants (id, name) VALUES ($1, 'floor')`, [tenantId]);
  const providerFetch = createProviderFetch();
  cleanups.push(async () => providerFetch.close());
  const client = createOpenAiClient({
    apiKey: 'sk-fake',
    baseUrl: options.providerUrl,
    timeoutMs: 30_000,
    fetch: providerFetch.fetch,
    log: pino({ level: 'silent' }),
  });
  const request = firstRequest();

  const app = Fastify();
  app.post('/v1/workflows', async (incoming, reply) => {
    if (incoming.headers.authorization !== `Bearer ${API_KEY}`) return reply.code(401).send();
    const body = incoming.body as { input?: unknown; mode?: unknown; tools?: unknown };
    if (typeof body?.input !== 'string') return reply.code(400).send();
    reply.hijack();
    const run = { pool, client, tenantId, request, input: body.input };
    await runWorkflow(run, String(body.mode), reply.raw).catch((error: unknown) => {
      reply.raw.destroy(error instanceof Error ? error : new Error(String(error)));
    });
  });
  cleanups.push(() => app.close());
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  return { baseUrls: [baseUrl], apiKey: API_KEY, model: undefined };
}

/** Turn one's request body as Waymark sends it, built once: the system prompt and the calculator. */
function firstRequest(): ReturnType<typeof convertRequest> {
  const tools = createToolRegistry([calculatorTool]).definitions();
  const system = buildSystemPrompt({ tools, hasSession: false, kind: 'simple', now: new Date() });
  return convertRequest(
    { system, messages: [], tools },
    { modelId: FLOOR_MODEL_ID, maxOutputTokens: 512 },
  );
}

interface FloorRun {
  pool: pg.Pool;
  client: OpenAI;
  tenantId: string;
  request: ReturnType<typeof convertRequest>;
  input: string;
}

async function runWorkflow(run: FloorRun, mode: string, response: ServerResponse): Promise<void> {
  const { pool, tenantId } = run;
  const id = randomUUID();
  const inserted = pool.query({
    name: 'floor_insert',
    text: INSERT,
    values: [id, tenantId, mode, FLOOR_MODEL_ID, run.input, ['calculator'], ORIGIN],
  });
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const messages: ChatCompletionMessageParam[] = [
    ...run.request.messages,
    { role: 'user', content: run.input },
  ];
  const firstStarted = performance.now();
  const first = streamCall(run, messages);
  await inserted;
  const one = await first;
  const call = one.calls[0];
  if (!call) throw new Error('the first turn made no tool call');
  const toolStarted = performance.now();
  const result = await calculatorTool.execute(
    calculatorTool.parameters.parse(JSON.parse(call.arguments)),
    { tenantId, workflowId: id, step: 'turn-1', callId: call.id, signal: NO_ABORT },
  );
  const content = wrapUntrustedOutput(
    { toolName: call.name, content: result.content, isError: false },
    20_000,
  );
  // The run's start goes with its first turn, as Waymark writes it (a deferred start).
  const turnEvents = [
    event('workflow_start', null, 'started', { input: run.input, mode }),
    event('classification', null, 'completed', { kind: 'simple', method: 'request' }),
    event('llm_call', 'turn-1', 'started', { model: FLOOR_MODEL_ID, turn: 1, tools: true }),
    event('llm_call', 'turn-1', 'completed', { finishReason: 'tool_calls' }, firstStarted),
    event('tool_call', 'turn-1', 'started', { tool: call.name, callId: call.id }),
    event('tool_call', 'turn-1', 'completed', { tool: call.name, callId: call.id }, toolStarted),
  ];
  const turn = {
    schemaVersion: 1,
    turn: 1,
    assistant: { content: one.text, toolCalls: [call] },
    toolResults: [{ toolCallId: call.id, toolName: call.name, content, isError: false }],
  };
  const written = writeStep(run, id, {
    name: 'floor_turn',
    text: TURN,
    status: 'running',
    usage: one,
    turn,
    events: turnEvents,
    result: null,
  });
  messages.push(
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } },
      ],
    },
    { role: 'tool', tool_call_id: call.id, content },
  );
  const secondStarted = performance.now();
  const second = streamCall(run, messages);
  response.write((await written).map(eventFrame).join(''));
  const two = await second;
  const endEvents = [
    event('llm_call', 'turn-2', 'started', { model: FLOOR_MODEL_ID, turn: 2, tools: true }),
    event('llm_call', 'turn-2', 'completed', { finishReason: 'stop' }, secondStarted),
    event('answer', null, 'completed', { text: two.text }),
    event('usage', null, 'completed', {
      inputTokens: one.inputTokens + two.inputTokens,
      outputTokens: one.outputTokens + two.outputTokens,
    }),
    event('workflow_end', null, 'completed', { status: 'completed' }),
  ];
  const endTurn = { schemaVersion: 1, turn: 2, assistant: { content: two.text, toolCalls: [] } };
  const ended = await writeStep(run, id, {
    name: 'floor_end',
    text: END,
    status: 'completed',
    usage: two,
    turn: endTurn,
    events: endEvents,
    result: { answer: two.text },
  });
  const tokens = serializeFrame({ kind: 'tokens', workflowId: id, text: two.text });
  response.end(tokens + ended.map(eventFrame).join(''));
}

/**
 * A turn's or the end's statement, its events encoded as Waymark encodes
 * them; resolves with them as stored, for the stream.
 */
async function writeStep(
  run: FloorRun,
  workflowId: string,
  step: {
    name: string;
    text: string;
    status: string;
    usage: StreamedTurn;
    turn: unknown;
    events: NewEventRow[];
    result: unknown;
  },
): Promise<WorkflowEvent[]> {
  const encoded = encodeEvents(step.events, new Date());
  const { rows } = await run.pool.query<{ last_seq: number }>({
    name: step.name,
    text: step.text,
    values: [
      step.status,
      step.usage.inputTokens,
      step.usage.outputTokens,
      encoded.count,
      workflowId,
      run.tenantId,
      JSON.stringify(step.turn),
      encoded.json,
      step.result === null ? null : JSON.stringify(step.result),
      encoded.ts,
    ],
  });
  const lastSeq = rows[0]?.last_seq;
  if (lastSeq === undefined)
    throw new Error(`workflow ${workflowId}: the ${step.name} was refused`);
  return encoded.rows({ workflowId, tenantId: run.tenantId, lastSeq }).map(toEvent);
}

const eventFrame = (event: WorkflowEvent) => serializeFrame({ kind: 'event', event });

interface StreamedTurn {
  text: string;
  calls: { id: string; name: string; arguments: string }[];
  inputTokens: number;
  outputTokens: number;
}

async function streamCall(
  run: FloorRun,
  messages: ChatCompletionMessageParam[],
): Promise<StreamedTurn> {
  const response = await run.client.chat.completions
    .create({ ...run.request, messages, stream: true, stream_options: { include_usage: true } })
    .asResponse();
  const turn: StreamedTurn = { text: '', calls: [], inputTokens: 0, outputTokens: 0 };
  const events = new SseDecoder();
  for await (const bytes of providerBody(response) as AsyncIterable<Buffer>) {
    for (const { data } of events.push(bytes)) {
      if (data.startsWith('[DONE]')) continue;
      const chunk = JSON.parse(data) as ChatCompletionChunk;
      const delta = chunk.choices[0]?.delta;
      if (delta?.content) turn.text += delta.content;
      for (const part of delta?.tool_calls ?? []) {
        turn.calls[part.index] ??= { id: '', name: '', arguments: '' };
        const call = turn.calls[part.index] as StreamedTurn['calls'][number];
        if (part.id) call.id = part.id;
        call.name += part.function?.name ?? '';
        call.arguments += part.function?.arguments ?? '';
      }
      if (chunk.usage) {
        turn.inputTokens = chunk.usage.prompt_tokens;
        turn.outputTokens = chunk.usage.completion_tokens;
      }
    }
  }
  return turn;
}

function event(
  type: EventType,
  step: string | null,
  status: EventStatus,
  detail: Record<string, unknown>,
  startedAt?: number,
): NewEventRow {
  const elapsedMs = startedAt === undefined ? null : Math.round(performance.now() - startedAt);
  return { type, step, status, detail, elapsedMs };
}
