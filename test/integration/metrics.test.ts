import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, listenLocally } from '../support/app.js';
import { pipelineRequests, planReply, stage } from '../support/pipeline-http.js';
import { answer, callsTo, useToolLoopHarness } from '../support/tool-loop-harness.js';
import {
  createTenant,
  orphanedWorkflow,
  startWorkflow,
  waitFor,
  waitForStatus,
} from '../support/workflows.js';

/**
 * `GET /metrics` over real HTTP against the app on the fake provider: the
 * Prometheus text format holds, the documented series move when their
 * thing happens, and no label takes a value per workflow or per path.
 */

const MAX_TAKEOVERS = 3;

const h = useToolLoopHarness({
  pricing: { input: 2, output: 8, cachedInput: 1 },
  env: {
    WORKFLOW_MAX_TAKEOVERS: String(MAX_TAKEOVERS),
    WORKFLOW_RETENTION_DAYS: '30',
    USAGE_LEDGER_RETENTION_DAYS: '30',
    PAUSED_WORKFLOW_EXPIRY_DAYS: '7',
  },
});
const { act, stalledAt } = pipelineRequests(() => h);
let base = '';

beforeAll(async () => {
  base = (await listenLocally(h.testApp.app)).url;
});

interface Scrape {
  text: string;
  /** Sample values by `name{labels}` as written. */
  samples: Map<string, number>;
  types: Map<string, string>;
}

/** Parses the exposition format, failing on what Prometheus would refuse or misread. */
function parse(text: string): Scrape {
  const samples = new Map<string, number>();
  const types = new Map<string, string>();
  const helps = new Set<string>();
  expect(text.endsWith('\n')).toBe(true);
  for (const line of text.trimEnd().split('\n')) {
    const comment = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (comment) {
      const [, kind, name, rest] = comment as unknown as [string, string, string, string];
      const seen = kind === 'HELP' ? helps : types;
      expect(seen.has(name), `${kind} ${name} once`).toBe(false);
      if (kind === 'HELP') helps.add(name);
      else types.set(name, rest);
      continue;
    }
    const sample =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*",?)*\})? (\S+)$/.exec(line);
    expect(sample, `a sample line: ${line}`).not.toBeNull();
    const [, name, , value] = sample as unknown as [string, string, string, string];
    const family = name.replace(/_(bucket|sum|count)$/, '');
    expect(types.has(name) || types.get(family) === 'histogram', `TYPE before ${line}`).toBe(true);
    expect(samples.has(line.slice(0, line.lastIndexOf(' '))), `${line} once`).toBe(false);
    samples.set(line.slice(0, line.lastIndexOf(' ')), Number(value));
  }
  // Histograms: buckets rise, and +Inf is _count.
  for (const [family, type] of types) {
    if (type !== 'histogram') continue;
    const series = new Map<string, number[]>();
    for (const [key, value] of samples) {
      const bucket = new RegExp(`^${family}_bucket\\{(.*?),?le="([^"]+)"\\}$`).exec(key);
      if (!bucket) continue;
      const labels = bucket[1] as string;
      series.set(labels, [...(series.get(labels) ?? []), value]);
      if (bucket[2] === '+Inf') {
        expect(samples.get(`${family}_count${labels ? `{${labels}}` : ''}`)).toBe(value);
      }
    }
    for (const counts of series.values()) {
      expect(counts).toEqual([...counts].sort((a, b) => a - b));
    }
  }
  return { text, samples, types };
}

/** `url`: another replica's; this one's when omitted. */
async function scrape(url = base): Promise<Scrape> {
  const response = await fetch(`${url}/metrics`, { headers: bearer(h.operatorKey) });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return parse(await response.text());
}

const value = (scraped: Scrape, series: string) => scraped.samples.get(series) ?? 0;

describe('GET /metrics', () => {
  it('needs an admin key of the operator tenant', async () => {
    expect((await fetch(`${base}/metrics`)).status).toBe(401);
    const other = await createTenant(h.testApp, h.operatorKey, { name: 'metrics-other' });
    const foreign = await fetch(`${base}/metrics`, { headers: bearer(other.key) });
    expect(foreign.status).toBe(403);
    expect(((await foreign.json()) as { code: string }).code).toBe('operator_only');
    const member = await h.testApp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: bearer(h.operatorKey),
      payload: { name: 'scraper', scopes: ['member'] },
    });
    const memberKey = (member.json() as { key: string }).key;
    const denied = await fetch(`${base}/metrics`, { headers: bearer(memberKey) });
    expect(denied.status).toBe(403);
    expect(((await denied.json()) as { code: string }).code).toBe('insufficient_scope');
  });

  it('a workflow with a tool call moves the workflow, model call, token, cost and tool call series', async () => {
    const before = await scrape();
    h.provider.enqueue(
      callsTo({ id: 'call_1', name: 'calculator', arguments: { expression: '2 + 2' } }),
      answer('Four.'),
    );
    const id = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'What is 2 + 2?',
      mode: 'simple',
    });
    const done = await waitForStatus(h.testApp, h.tenant.key, id, ['completed']);
    const after = await scrape();
    const delta = (series: string) => value(after, series) - value(before, series);
    expect(delta('waymark_workflows_started_total')).toBe(1);
    expect(delta('waymark_workflows_finished_total{status="completed"}')).toBe(1);
    expect(delta('waymark_tool_calls_total{status="completed"}')).toBe(1);
    const gpt = 'provider="oai",model="gpt"';
    expect(delta(`waymark_llm_calls_total{${gpt},outcome="ok"}`)).toBe(2);
    expect(delta(`waymark_llm_call_duration_seconds_count{${gpt}}`)).toBe(2);
    const usage = done.usage as { inputTokens: number; outputTokens: number; costUsd: number };
    expect(delta(`waymark_llm_tokens_total{${gpt},kind="input"}`)).toBe(usage.inputTokens);
    expect(delta(`waymark_llm_tokens_total{${gpt},kind="output"}`)).toBe(usage.outputTokens);
    expect(delta(`waymark_llm_cost_usd_total{${gpt}}`)).toBeCloseTo(usage.costUsd, 9);
    expect(usage.costUsd).toBeGreaterThan(0);
    // A model call that fails for good fails its workflow: both counted, by the error's kind.
    h.provider.enqueue({ kind: 'error', status: 400 });
    const failing = await startWorkflow(h.testApp, h.tenant.key, { input: 'Fail', mode: 'simple' });
    await waitForStatus(h.testApp, h.tenant.key, failing, ['failed']);
    const failed = await scrape();
    expect(
      value(failed, 'waymark_workflows_finished_total{status="failed"}') -
        value(after, 'waymark_workflows_finished_total{status="failed"}'),
    ).toBe(1);
    expect(
      [...failed.samples.keys()].some(
        (series) =>
          series.startsWith(`waymark_llm_calls_total{${gpt},outcome=`) && !series.endsWith('"ok"}'),
      ),
    ).toBe(true);
    // Counters never fall between scrapes.
    for (const [series, earlier] of before.samples) {
      const family = series.replace(/\{.*$/, '');
      if (before.types.get(family) !== 'counter') continue;
      expect(value(failed, series), series).toBeGreaterThanOrEqual(earlier);
    }
  });

  it('routes are labelled by pattern, and unknown paths share one series: no id becomes a label', async () => {
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of ids) {
      expect(
        (await fetch(`${base}/v1/workflows/${id}`, { headers: bearer(h.tenant.key) })).status,
      ).toBe(404);
      expect((await fetch(`${base}/no/such/${id}`)).status).toBe(404);
    }
    const first = await scrape();
    for (const id of ids) await fetch(`${base}/other/${id}?q=${id}`, { method: 'POST' });
    const second = await scrape();
    expect(
      value(
        second,
        'waymark_http_requests_total{method="GET",route="/v1/workflows/:id",status="404"}',
      ),
    ).toBeGreaterThanOrEqual(3);
    expect(
      value(second, 'waymark_http_requests_total{method="POST",route="unmatched",status="404"}'),
    ).toBe(3);
    // Unknown paths added counts, not series (the scrape's own request aside, already there).
    const seriesOf = (scraped: Scrape) =>
      [...scraped.samples.keys()].filter((series) =>
        series.startsWith('waymark_http_requests_total'),
      );
    expect(seriesOf(second).length - seriesOf(first).length).toBe(1);
    const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
    expect(second.text).not.toMatch(uuid);
    expect(second.text).not.toContain(h.tenant.id);
  });

  it('counts event streams while they are open, runs in progress and stage attempts', async () => {
    const id = await stalledAt(
      'Compare p and q while streamed',
      [planReply(stage('p'), stage('q')), answer('Result of p.')],
      'q/turn-1',
    );
    const before = await scrape();
    const controller = new AbortController();
    const stream = await fetch(`${base}/v1/workflows/${id}/events`, {
      headers: bearer(h.tenant.key),
      signal: controller.signal,
    });
    expect(stream.status).toBe(200);
    const open = await scrape();
    expect(value(open, 'waymark_sse_streams_open')).toBe(
      value(before, 'waymark_sse_streams_open') + 1,
    );
    expect(value(open, 'waymark_sse_streams_opened_total')).toBe(
      value(before, 'waymark_sse_streams_opened_total') + 1,
    );
    expect(value(open, 'waymark_workflow_runs_in_progress')).toBeGreaterThanOrEqual(1);
    expect((await act(id, 'cancel')).statusCode).toBe(202);
    // The stream ends after workflow_end; the gauge falls back once it has.
    await stream.text().catch(() => undefined);
    await waitFor(
      async () =>
        value(await scrape(), 'waymark_sse_streams_open') ===
          value(before, 'waymark_sse_streams_open') || undefined,
      'the stream to be counted closed',
    );
    const ended = await scrape();
    expect(
      value(ended, 'waymark_workflows_finished_total{status="cancelled"}') -
        value(before, 'waymark_workflows_finished_total{status="cancelled"}'),
    ).toBe(1);
    expect(
      value(ended, 'waymark_pipeline_stage_attempts_total{status="completed"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(
      value(ended, 'waymark_pipeline_stage_attempts_total{status="failed"}'),
    ).toBeGreaterThanOrEqual(1);
    controller.abort();
  });

  it('reports the database pool and the process’s memory at each scrape', async () => {
    const pool = h.testApp.services.database.pool;
    const held = await pool.connect();
    try {
      const scraped = await scrape();
      expect(scraped.types.get('waymark_db_pool_connections')).toBe('gauge');
      const inUse = value(scraped, 'waymark_db_pool_connections{state="in_use"}');
      expect(inUse).toBeGreaterThanOrEqual(1);
      expect(scraped.samples.has('waymark_db_pool_connections{state="idle"}')).toBe(true);
      expect(scraped.samples.has('waymark_db_pool_waiting')).toBe(true);
      expect(value(scraped, 'process_resident_memory_bytes')).toBeGreaterThan(1_000_000);
      expect(value(scraped, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(1_000_000);
    } finally {
      held.release();
    }
  });

  it('counts the lease sweep’s takeovers, and the workflows it failed with too_many_takeovers apart', async () => {
    const before = await scrape();
    const delta = (after: Scrape, series: string) => value(after, series) - value(before, series);
    const resumed = await orphanedWorkflow(h.testApp, h.tenant.id);
    h.provider.enqueue(answer('It is 42.'));
    const taken = await h.testApp.services.reclaimer.sweepOnce();
    expect(taken.map((workflow) => workflow.id)).toContain(resumed);
    await waitForStatus(h.testApp, h.tenant.key, resumed, ['completed']);
    const afterResume = await scrape();
    expect(afterResume.types.get('waymark_workflow_takeovers_total')).toBe('counter');
    expect(delta(afterResume, 'waymark_workflow_takeovers_total')).toBe(taken.length);
    expect(delta(afterResume, 'waymark_workflow_takeovers_exhausted_total')).toBe(0);

    const exhausted = await orphanedWorkflow(h.testApp, h.tenant.id);
    await h.testApp.services.database.pool.query(
      'UPDATE workflows SET takeovers_without_progress = $2, progress_at_takeover = 0 WHERE id = $1',
      [exhausted, MAX_TAKEOVERS],
    );
    const takenAgain = await h.testApp.services.reclaimer.sweepOnce();
    expect(takenAgain.map((workflow) => workflow.id)).toContain(exhausted);
    await waitForStatus(h.testApp, h.tenant.key, exhausted, ['failed']);
    const after = await scrape();
    expect(delta(after, 'waymark_workflow_takeovers_total')).toBe(taken.length + takenAgain.length);
    expect(delta(after, 'waymark_workflow_takeovers_exhausted_total')).toBe(1);
    // The failure is one of the finished workflows too, counted once there.
    expect(
      value(after, 'waymark_workflows_finished_total{status="failed"}') -
        value(afterResume, 'waymark_workflows_finished_total{status="failed"}'),
    ).toBe(1);
  });

  it('reports each provider’s circuit breaker: 1 once it opened, 0 while closed', async () => {
    // A replica of its own, so that its open breaker holds up no other test.
    const replica = await h.startReplica({ LLM_BREAKER_THRESHOLD: '1' });
    const url = (await listenLocally(replica.app)).url;
    const before = await scrape(url);
    expect(before.types.get('waymark_llm_breaker_open')).toBe('gauge');
    expect(value(before, 'waymark_llm_breaker_open{provider="oai"}')).toBe(0);
    expect(before.samples.has('waymark_llm_breaker_open{provider="ant"}')).toBe(true);
    h.provider.enqueue({ kind: 'error', status: 500 });
    const id = await startWorkflow(replica, h.tenant.key, { input: 'Fail', mode: 'simple' });
    await waitForStatus(replica, h.tenant.key, id, ['failed']);
    const after = await scrape(url);
    expect(value(after, 'waymark_llm_breaker_open{provider="oai"}')).toBe(1);
    expect(value(after, 'waymark_llm_breaker_open{provider="ant"}')).toBe(0);
  });

  it('counts the probes of an open breaker by outcome: one failed, then the one that closes it', async () => {
    const replica = await h.startReplica({
      LLM_BREAKER_THRESHOLD: '1',
      LLM_BREAKER_PROBE_MS: '100',
    });
    const url = (await listenLocally(replica.app)).url;
    const before = await scrape(url);
    expect(before.types.get('waymark_llm_breaker_probes_total')).toBe('counter');
    // The workflow's call opens the breaker; the first probe fails; the next gets an answer.
    h.provider.enqueue(
      { kind: 'error', status: 500 },
      { kind: 'error', status: 500 },
      { kind: 'reply', text: 'pong' },
    );
    const id = await startWorkflow(replica, h.tenant.key, { input: 'Fail', mode: 'simple' });
    await waitForStatus(replica, h.tenant.key, id, ['failed']);
    await expect
      .poll(async () => value(await scrape(url), 'waymark_llm_breaker_open{provider="oai"}'), {
        timeout: 5000,
      })
      .toBe(0);
    const after = await scrape(url);
    const probes = (outcome: string) =>
      value(after, `waymark_llm_breaker_probes_total{provider="oai",outcome="${outcome}"}`) -
      value(before, `waymark_llm_breaker_probes_total{provider="oai",outcome="${outcome}"}`);
    expect(probes('failed')).toBe(1);
    expect(probes('ok')).toBe(1);
  });

  it('counts what the retention sweep deleted, by kind, and the paused workflows it expired', async () => {
    const pool = h.testApp.services.database.pool;
    h.provider.enqueue(
      callsTo({
        id: 'call_q',
        name: 'ask_user',
        arguments: { question: 'Which city?', question_type: 'free_text' },
      }),
    );
    const paused = await startWorkflow(h.testApp, h.tenant.key, {
      input: 'What is the weather like?',
      mode: 'simple',
    });
    await waitForStatus(h.testApp, h.tenant.key, paused, ['awaiting_input']);
    await pool.query(`UPDATE workflows SET paused_at = now() - interval '8 days' WHERE id = $1`, [
      paused,
    ]);
    h.provider.enqueue(answer('Old.'));
    const old = await startWorkflow(h.testApp, h.tenant.key, { input: 'Old', mode: 'simple' });
    await waitForStatus(h.testApp, h.tenant.key, old, ['completed']);
    await pool.query(
      `UPDATE workflows SET finished_at = now() - interval '31 days' WHERE id = $1`,
      [old],
    );
    // The ledger writes its rows in the background.
    await waitFor(async () => {
      const { rows } = await pool.query<{ count: string }>(
        'SELECT count(*) AS count FROM llm_calls WHERE workflow_id = $1',
        [old],
      );
      return Number(rows[0]?.count) > 0 || undefined;
    }, 'the ledger rows of the old workflow');
    await pool.query(
      `UPDATE llm_calls SET started_at = now() - interval '31 days' WHERE workflow_id = $1`,
      [old],
    );
    const before = await scrape();
    const counts = await h.testApp.services.retention.sweepOnce();
    expect(counts.expired).toBe(1);
    expect(counts.workflows).toBeGreaterThanOrEqual(1);
    expect(counts.llmCalls).toBeGreaterThanOrEqual(1);
    const after = await scrape();
    const delta = (series: string) => value(after, series) - value(before, series);
    expect(delta('waymark_retention_deleted_total{kind="workflows"}')).toBe(counts.workflows);
    expect(delta('waymark_retention_deleted_total{kind="llm_calls"}')).toBe(counts.llmCalls);
    expect(delta('waymark_retention_deleted_total{kind="api_keys"}')).toBe(counts.apiKeys);
    expect(delta('waymark_paused_workflows_expired_total')).toBe(1);
    expect(delta('waymark_workflows_finished_total{status="cancelled"}')).toBe(1);
  });
});
