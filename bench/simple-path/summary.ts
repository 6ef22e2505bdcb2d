import os from 'node:os';
import type { StatementCount } from '../support/db-roundtrips.js';
import type { CpuParts } from '../support/machine-cpu.js';
import { type Percentiles, round } from '../support/stats.js';

/** bench/simple-path's figures: what a phase measured, and the printed summary. */

/** From the issue. */
export const TARGET_OVERHEAD_P50_MS_C1 = 3;
export const TARGET_WPS_C32 = 450;
export const HIGH_CONCURRENCY = 32;

export interface Plan {
  workflowsC1: number;
  workflowsC32: number;
  warmup: number;
  warmupC1: number;
  model: string | undefined;
  providerPort: number;
  providerHost: string;
  providerUrl: string | undefined;
  service: { urls: string[]; apiKey: string } | undefined;
  serveProvider: boolean;
  showSql: boolean;
  /** In-process only: `off` takes the WAL flush out of every commit, to see what it costs. */
  synchronousCommit: 'on' | 'off';
  /** The clients and the fake in the service's own thread (one event loop for all), as before 2026-11-30. */
  oneLoop: boolean;
  /** floor.ts in place of Waymark: what the required parts cost alone. */
  floor: boolean;
  /** Every create with an Idempotency-Key of its own. */
  idempotencyKeys: boolean;
  /** Set: the workflows run in sessions, this many in each. */
  sessionTurns: number | undefined;
}

/** A workflow's overhead by where it falls around the model calls (index.ts). */
export interface OverheadParts {
  beforeFirstCall: Percentiles;
  betweenCalls: Percentiles;
  afterLastCall: Percentiles;
}

export interface PhaseResult {
  concurrency: number;
  workflows: number;
  wps: number;
  wallMs: Percentiles;
  /** Undefined when the fake runs elsewhere. */
  insideProviderMs: Percentiles | undefined;
  overheadMs: Percentiles | undefined;
  overheadParts: OverheadParts | undefined;
  /** Undefined when the service runs elsewhere. */
  statements: StatementCount[] | undefined;
  /** CPU time of this process, every thread (the load's too when it runs here), per workflow. */
  cpuMsPerWorkflow: number;
  /** CPU milliseconds of the phase by part (Linux only; PostgreSQL only when embedded here). */
  cpuParts: CpuParts | undefined;
  /** Share of the phase the service's (the main thread's) event loop was busy, 0..1. */
  eventLoopUtilization: number;
}

export interface Results {
  plan: Plan;
  where: string;
  c1: PhaseResult;
  c32: PhaseResult;
}

function roundTripsPerWorkflow(phase: PhaseResult): number | undefined {
  if (!phase.statements) return undefined;
  const calls = phase.statements.reduce((total, statement) => total + statement.calls, 0);
  return calls / phase.workflows;
}

function formatMs(values: Percentiles | undefined): string {
  if (!values) return 'unknown (the fake runs elsewhere)';
  return `p50 ${round(values.p50, 2)} ms, p99 ${round(values.p99, 2)} ms, mean ${round(values.mean, 2)} ms`;
}

function phaseLines(phase: PhaseResult): string[] {
  const lines = [
    `  concurrency ${phase.concurrency}: ${phase.workflows} workflows, ${round(phase.wps, 1)} workflows/s`,
    `    wall time        ${formatMs(phase.wallMs)}`,
    `    inside provider  ${formatMs(phase.insideProviderMs)}`,
    `    overhead         ${formatMs(phase.overheadMs)}`,
    `    this process: ${round(phase.cpuMsPerWorkflow, 2)} ms CPU per workflow (every thread), the service's event loop ${Math.round(phase.eventLoopUtilization * 100)}% busy`,
  ];
  const parts = phase.overheadParts;
  if (parts) {
    const each = (name: string, values: Percentiles) =>
      `${name} p50 ${round(values.p50, 2)} (mean ${round(values.mean, 2)})`;
    lines.push(
      `      by part, ms: ${each('before the first model call', parts.beforeFirstCall)}, ` +
        `${each('between the calls', parts.betweenCalls)}, ${each('after the last', parts.afterLastCall)}`,
    );
  }
  if (phase.cpuParts) lines.push(cpuLine(phase.cpuParts, phase.workflows));
  const perWorkflow = roundTripsPerWorkflow(phase);
  if (!phase.statements || perWorkflow === undefined) {
    lines.push('    Postgres round trips: not counted (the service runs elsewhere)');
    return lines;
  }
  const dbMs = phase.statements.reduce((total, statement) => total + statement.totalMs, 0);
  lines.push(
    `    Postgres round trips: ${round(perWorkflow, 2)} per workflow, ${round(dbMs / phase.workflows, 2)} ms summed per workflow (call to answer)`,
    '      per workflow  ms each  statement',
  );
  for (const statement of phase.statements) {
    lines.push(
      `      ${String(round(statement.calls / phase.workflows, 2)).padStart(12)}  ${String(
        round(statement.totalMs / statement.calls, 3),
      ).padStart(7)}  ${statement.kind}`,
    );
  }
  return lines;
}

/**
 * CPU per workflow by part, and the rate the machine's cores would allow if
 * that sum were all of it (10 ms ticks: read it over thousands of workflows).
 */
function cpuLine(parts: CpuParts, workflows: number): string {
  const each = (ms: number) => round(ms / workflows, 2);
  const sum = parts.mainThread + parts.loadThread + parts.otherThreads + parts.postgres;
  const ceiling = (os.cpus().length * 1000) / (sum / workflows);
  return (
    `    CPU per workflow: service thread ${each(parts.mainThread)} ms, load thread ${each(parts.loadThread)} ms, ` +
    `other threads (GC, libuv, loader) ${each(parts.otherThreads)} ms, PostgreSQL ${each(parts.postgres)} ms; ` +
    `sum ${each(sum)} ms (${os.cpus().length} cores at that cost: ${Math.round(ceiling)}/s)`
  );
}

export function printSummary(results: Results): void {
  const { plan, c1, c32 } = results;
  const lines = [
    `simple-path: two-turn tool loop (calculator, then the answer) per workflow, POST with Accept: text/event-stream${plan.idempotencyKeys ? ' and an Idempotency-Key' : ''}${plan.sessionTurns === undefined ? '' : `, in sessions of ${plan.sessionTurns} workflows`}; ` +
      `${plan.warmup} warm-up workflows at concurrency ${HIGH_CONCURRENCY}, then ${plan.warmupC1} at 1; ${results.where}; ${os.cpus().length} CPUs; load average ${round(os.loadavg()[0] ?? Number.NaN, 2)}`,
    ...phaseLines(c1),
    ...phaseLines(c32),
  ];
  if (plan.showSql) {
    lines.push('  statements (first of each kind):');
    const examples = new Map<string, string>();
    for (const statement of [...(c1.statements ?? []), ...(c32.statements ?? [])]) {
      if (!examples.has(statement.kind)) examples.set(statement.kind, statement.example);
    }
    for (const [kind, example] of examples) lines.push(`    ${kind}: ${example}`);
  }
  if (c1.overheadMs) {
    const met = c1.overheadMs.p50 <= TARGET_OVERHEAD_P50_MS_C1;
    lines.push(
      `  target: overhead p50 <= ${TARGET_OVERHEAD_P50_MS_C1} ms at concurrency 1: ${round(c1.overheadMs.p50, 2)} ms, ${met ? 'met' : 'MISSED'}`,
    );
  }
  lines.push(
    `  target: >= ${TARGET_WPS_C32} workflows/s at concurrency ${HIGH_CONCURRENCY}: ${round(c32.wps, 1)}, ${c32.wps >= TARGET_WPS_C32 ? 'met' : 'MISSED'}`,
  );
  const roundTrips = roundTripsPerWorkflow(c1);
  lines.push(
    // The one line scripts parse: keep it last and its keys stable.
    `bench ${plan.floor ? 'simple-path-floor' : 'simple-path'}: ${JSON.stringify({
      overhead_p50_ms_c1: c1.overheadMs ? round(c1.overheadMs.p50, 2) : null,
      overhead_p99_ms_c1: c1.overheadMs ? round(c1.overheadMs.p99, 2) : null,
      wps_c32: round(c32.wps, 1),
      db_roundtrips_per_workflow: roundTrips === undefined ? null : round(roundTrips, 2),
    })}`,
    '',
  );
  process.stdout.write(lines.join('\n'));
}
