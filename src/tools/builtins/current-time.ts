import { z } from 'zod';
import type { Tool } from '../types.js';

const parameters = z.object({
  timezone: z
    .string()
    .trim()
    .min(1)
    .max(64)
    .optional()
    .describe('IANA time zone, e.g. "Europe/Paris" or "America/New_York"; default UTC.'),
});

export interface CurrentTimeOptions {
  /** The clock; tests pass a fixed one. */
  now?: () => Date;
}

/** The time in a zone, as the model needs it: local ISO time with offset, weekday, zone. */
export interface ZonedTime {
  timezone: string;
  /** Local time with its UTC offset, e.g. `2024-03-31T03:30:00+02:00`. */
  localTime: string;
  weekday: string;
  utcOffset: string;
  utcTime: string;
}

export function createCurrentTimeTool(options: CurrentTimeOptions = {}): Tool<typeof parameters> {
  const now = options.now ?? (() => new Date());
  return {
    name: 'current_time',
    description:
      'Returns the current date and time: local ISO 8601 time with UTC offset, weekday and time zone. ' +
      'Use it for anything that depends on today’s date or the time of day.',
    parameters,
    timeoutMs: 1000,
    async execute({ timezone }) {
      const zone = timezone ?? 'UTC';
      const formatter = zoneFormatter(zone);
      if (!formatter) {
        return {
          content: `Unknown time zone "${zone}": give an IANA name such as "Europe/Berlin", "Asia/Tokyo" or "UTC".`,
          isError: true,
        };
      }
      return { content: JSON.stringify(zonedTime(now(), formatter, zone)) };
    },
  };
}

function zoneFormatter(zone: string): Intl.DateTimeFormat | undefined {
  try {
    return new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      weekday: 'long',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    });
  } catch (error) {
    // Intl's answer to a zone it does not know; anything else is a bug to surface.
    if (error instanceof RangeError) return undefined;
    throw error;
  }
}

/**
 * `asked`: the zone's name as the model gave it. Reported as asked (in
 * Intl's case when only the case differs): Intl resolves a current name to
 * its deprecated alias on Node 20 (Asia/Kolkata to Asia/Calcutta,
 * Europe/Kyiv to Europe/Kiev), which the model would then repeat.
 */
function zonedTime(instant: Date, formatter: Intl.DateTimeFormat, asked: string): ZonedTime {
  const parts = Object.fromEntries(
    formatter.formatToParts(instant).map((part) => [part.type, part.value]),
  ) as Record<Intl.DateTimeFormatPartTypes, string | undefined>;
  const field = (type: Intl.DateTimeFormatPartTypes) => Number(parts[type] ?? 0);
  const wholeSeconds = Math.floor(instant.getTime() / 1000) * 1000;
  const localAsUtc = Date.UTC(
    field('year'),
    field('month') - 1,
    field('day'),
    field('hour'),
    field('minute'),
    field('second'),
  );
  const offsetMinutes = Math.round((localAsUtc - wholeSeconds) / 60_000);
  const sign = offsetMinutes < 0 ? '-' : '+';
  const absolute = Math.abs(offsetMinutes);
  const utcOffset = `${sign}${pad(Math.floor(absolute / 60))}:${pad(absolute % 60)}`;
  const local = new Date(localAsUtc).toISOString().slice(0, 19);
  const resolved = formatter.resolvedOptions().timeZone;
  return {
    timezone: resolved.toLowerCase() === asked.toLowerCase() ? resolved : asked,
    localTime: `${local}${utcOffset}`,
    weekday: parts.weekday ?? '',
    utcOffset,
    utcTime: new Date(wholeSeconds).toISOString().replace('.000Z', 'Z'),
  };
}

const pad = (value: number) => String(value).padStart(2, '0');
