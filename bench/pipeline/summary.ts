import os from 'node:os';
import { type Percentiles, round, summarise } from '../support/stats.js';
import { LEDGER_TABLE, type TableBytes } from './storage.js';
import { msPerWindow, perWindow, type WindowTotals } from './windows.js';

/** The figures of bench/pipeline, and the summary it prints. */

/** From the issue. */
const TARGET_CONTINUE_P50_MS = 5;
const TARGET_BYTES_PER_STAGE_SPREAD = 0.2;
/** A continue slower than this waited for something other than the database (see the report). */
const SLOW_CONTINUE_MS = 1000;

/** One measured continue, in `performance.now()` times of this process. */
export interface ContinueSample {
  sentAt: number;
  /** The 202 of the continue arrived. */
  repliedAt: number;
  /** The `review` event (the continue's transaction) committed. */
  reviewCommittedAt: number;
  /** The next stage's `started` event committed. */
  startedCommittedAt: number;
  /** The SSE client parsed the next stage's `started` frame. */
  arrivedAt: number;
}

export interface SizeResult {
  stages: number;
  tables: TableBytes[];
  /** Row bytes of the workflow's own tables (the ledger left out). */
  bytes: number;
  walBytes: number;
  /** From one stage's `started` commit to the next one's. */
  stageIntervalMs: Percentiles;
  roundTrips: WindowTotals;
  /** Compacted relation sizes around the workflow; only for the largest size. */
  physicalBytes: number | undefined;
}

export interface Results {
  warmup: number;
  reviewDelayMs: number;
  showSql: boolean;
  samples: ContinueSample[];
  stage: WindowTotals;
  continuePath: WindowTotals;
  /** By plan size, ascending. */
  sizes: SizeResult[];
}

/** Least-squares line through the points. */
function fitLine(points: { x: number; y: number }[]): { slope: number; intercept: number } {
  const meanX = points.reduce((sum, point) => sum + point.x, 0) / points.length;
  const meanY = points.reduce((sum, point) => sum + point.y, 0) / points.length;
  let covariance = 0;
  let variance = 0;
  for (const { x, y } of points) {
    covariance += (x - meanX) * (y - meanY);
    variance += (x - meanX) ** 2;
  }
  const slope = covariance / variance;
  return { slope, intercept: meanY - slope * meanX };
}

/**
 * Bytes per stage at each plan size: (bytes − fixed) / stages, where the
 * fixed part (the workflow row, its start, classification, usage, answer
 * and end events, the planner's and the synthesis' model calls) is the
 * intercept of the least-squares line through (stages, bytes) over every
 * size run. Total / stages would charge that fixed part to the stages, the
 * more so the fewer there are, and call a linear store non-linear. The
 * fit does not hide non-linear growth: a row that grew with the stages
 * before it would leave the small plans far off the line, and their
 * figure divides that miss by few stages.
 */
function storageFigures(sizes: SizeResult[]) {
  const rows = fitLine(sizes.map((size) => ({ x: size.stages, y: size.bytes })));
  const wal = fitLine(sizes.map((size) => ({ x: size.stages, y: size.walBytes })));
  const perStage = new Map(
    sizes.map((size) => [size.stages, (size.bytes - rows.intercept) / size.stages]),
  );
  return { fixedBytes: rows.intercept, perStage, walPerStage: wal.slope };
}

function formatMs(values: Percentiles): string {
  return `p50 ${round(values.p50, 2)} ms, p99 ${round(values.p99, 2)} ms, mean ${round(values.mean, 2)} ms`;
}

function statementLines(totals: WindowTotals, indent: string): string[] {
  const lines = [`${indent}per window  ms each  statement`];
  const sorted = [...totals.statements.entries()].sort((a, b) => b[1].calls - a[1].calls);
  for (const [kind, statement] of sorted) {
    const calls = String(round(statement.calls / totals.windows, 2)).padStart(10);
    const each = String(round(statement.totalMs / statement.calls, 3)).padStart(7);
    lines.push(`${indent}${calls}  ${each}  ${kind}`);
  }
  return lines;
}

/** A table row: each cell right-aligned to its header's width. */
function tableRow(widths: number[], cells: (string | number)[]): string {
  return cells.map((cell, index) => String(cell).padStart(widths[index] ?? 0)).join('  ');
}

function storageLines(sizes: SizeResult[]): string[] {
  const figures = storageFigures(sizes);
  const headers = [
    'stages',
    'row bytes',
    'total/N',
    '(bytes-fixed)/N',
    'WAL bytes',
    'stage to stage p50',
    'round trips/stage',
    'ms in statements/stage',
  ];
  const widths = headers.map((header) => header.length);
  const lines = [
    '  storage per workflow, one workflow per plan size, no checkpoint (storage.ts says how each is measured):',
    `    ${tableRow(widths, headers)}  rows/bytes by table`,
  ];
  for (const size of sizes) {
    const byTable = size.tables
      .map((entry) => {
        const ledger = entry.table === LEDGER_TABLE.table ? '+' : '';
        return `${ledger}${entry.table} ${entry.rows}/${entry.bytes}`;
      })
      .join(', ');
    const cells = [
      size.stages,
      size.bytes,
      Math.round(size.bytes / size.stages),
      Math.round(figures.perStage.get(size.stages) ?? Number.NaN),
      size.walBytes,
      `${round(size.stageIntervalMs.p50, 2)} ms`,
      round(perWindow(size.roundTrips), 2),
      round(msPerWindow(size.roundTrips), 2),
    ];
    lines.push(`    ${tableRow(widths, cells)}  ${byTable}`);
  }
  lines.push(
    `    fixed part ${Math.round(figures.fixedBytes)} bytes (intercept of the least-squares line over the sizes); ` +
      `WAL ${Math.round(figures.walPerStage)} bytes per stage (its slope); ` +
      `+${LEDGER_TABLE.table} is the usage ledger, shown but not counted`,
  );
  const largest = sizes.at(-1);
  if (largest?.physicalBytes !== undefined) {
    lines.push(
      `    physical, ${largest.stages} stages: ${largest.physicalBytes} bytes of heap, TOAST and indexes ` +
        `after VACUUM FULL (${round(largest.physicalBytes / largest.bytes, 2)}x its row bytes)`,
    );
  }
  return lines;
}

export function printSummary(results: Results): void {
  const { samples, sizes } = results;
  const latencies = samples.map((one) => one.arrivedAt - one.sentAt);
  const latency = summarise(latencies);
  const slow = latencies.filter((ms) => ms > SLOW_CONTINUE_MS).length;
  const phase = (from: keyof ContinueSample, to: keyof ContinueSample) =>
    formatMs(summarise(samples.map((one) => one[to] - one[from])));
  const lines = [
    `pipeline: ${samples.length} workflows of 5 stages with a checkpoint at stage 3 (${results.warmup} warm-up), ` +
      `one at a time, continue sent ${results.reviewDelayMs} ms after the checkpoint frame; service, fake provider and ` +
      `clients in one process over loopback, embedded PostgreSQL; ${os.cpus().length} CPUs; ` +
      `load average ${round(os.loadavg()[0] ?? Number.NaN, 2)}`,
    `  continue -> next stage started, at the SSE client  ${formatMs(latency)}; over ${SLOW_CONTINUE_MS} ms: ${slow}`,
    `    continue sent -> review committed         ${phase('sentAt', 'reviewCommittedAt')}`,
    `    review committed -> started committed     ${phase('reviewCommittedAt', 'startedCommittedAt')}`,
    `    started committed -> frame at the client  ${phase('startedCommittedAt', 'arrivedAt')}`,
    `    (continue sent -> its 202 at the client   ${phase('sentAt', 'repliedAt')})`,
    `  Postgres round trips, continue sent -> next stage's started committed: ` +
      `${round(perWindow(results.continuePath), 2)}, ${round(msPerWindow(results.continuePath), 2)} ms in statements`,
    ...statementLines(results.continuePath, '    '),
    `  Postgres round trips per stage, one stage's started commit to the next one's ` +
      `(${results.stage.windows} windows): ${round(perWindow(results.stage), 2)}, ` +
      `${round(msPerWindow(results.stage), 2)} ms in statements`,
    ...statementLines(results.stage, '    '),
    ...storageLines(sizes),
  ];
  const figures = storageFigures(sizes);
  const smallest = sizes[0];
  const largest = sizes.at(-1);
  const perStageSmall = figures.perStage.get(smallest?.stages ?? 0) ?? Number.NaN;
  const perStageLarge = figures.perStage.get(largest?.stages ?? 0) ?? Number.NaN;
  const spread = Math.abs(perStageLarge / perStageSmall - 1);
  lines.push(
    `  target: continue -> next stage p50 <= ${TARGET_CONTINUE_P50_MS} ms: ${round(latency.p50, 2)} ms, ${
      latency.p50 <= TARGET_CONTINUE_P50_MS ? 'met' : 'MISSED'
    }`,
    `  target: bytes per stage within ${TARGET_BYTES_PER_STAGE_SPREAD * 100}% from ${smallest?.stages} to ` +
      `${largest?.stages} stages: ${Math.round(perStageSmall)} -> ${Math.round(perStageLarge)} ` +
      `(${round(spread * 100, 1)}%), ${spread <= TARGET_BYTES_PER_STAGE_SPREAD ? 'met' : 'MISSED'}`,
  );
  if (results.showSql) {
    lines.push('  statements (first of each kind):');
    const examples = new Map<string, string>();
    for (const totals of [results.continuePath, results.stage]) {
      for (const [kind, statement] of totals.statements) {
        if (!examples.has(kind)) examples.set(kind, statement.example);
      }
    }
    for (const [kind, example] of examples) lines.push(`    ${kind}: ${example}`);
  }
  const bytesPerStage = (stages: number) => {
    const value = figures.perStage.get(stages);
    return value === undefined ? null : Math.round(value);
  };
  lines.push(
    // The one line scripts parse: keep it last and its keys stable.
    `bench pipeline: ${JSON.stringify({
      continue_p50_ms: round(latency.p50, 2),
      continue_p99_ms: round(latency.p99, 2),
      bytes_per_stage_10: bytesPerStage(10),
      bytes_per_stage_200: bytesPerStage(200),
      db_roundtrips_per_stage: round(perWindow(results.stage), 2),
    })}`,
    '',
  );
  process.stdout.write(lines.join('\n'));
}
