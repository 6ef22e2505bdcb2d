/** Small number helpers every benchmark's summary uses. */

/** Nearest-rank percentile of ascending values. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] ?? Number.NaN;
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
