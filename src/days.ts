/** Milliseconds in a day: days are counted in UTC, where every day has as many. */
const DAY_MS = 86_400_000;

/** The moment `days` days before `when`. */
export function daysBefore(when: Date, days: number): Date {
  return new Date(when.getTime() - days * DAY_MS);
}
