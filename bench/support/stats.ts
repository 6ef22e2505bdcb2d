/** Small number helpers every benchmark's summary uses. */

/** Nearest-rank percentile of ascending values. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] ?? Number.NaN;
}

export interface Percentiles {
  p50: number;
  p99: number;
  mean: number;
}

/** p50, p99 and mean of `values` (NaN for none). */
export function summarise(values: number[]): Percentiles {
  const sorted = Float64Array.from(values).sort();
  const sum = sorted.reduce((total, value) => total + value, 0);
  return {
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    mean: sorted.length > 0 ? sum / sorted.length : Number.NaN,
  };
}

export function round(value: number, digits: number): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** A command-line option that must be a whole number of at least `min`. */
export function wholeNumber(option: string, value: string, min: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min) {
    throw new Error(`${option} must be a whole number of at least ${min}, got "${value}"`);
  }
  return Number(value);
}
