import { describe, expect, it } from 'vitest';
import { createCurrentTimeTool } from '../../../src/tools/builtins/current-time.js';
import type { ToolContext } from '../../../src/tools/types.js';

const ctx: ToolContext = {
  tenantId: 't',
  workflowId: 'w',
  step: 'turn-1',
  callId: 'c1',
  signal: new AbortController().signal,
};

// 01:30 UTC on the night Central Europe moves to summer time (at 01:00 UTC).
const instant = new Date('2024-03-31T01:30:45.678Z');
const tool = createCurrentTimeTool({ now: () => instant });

async function timeIn(timezone?: string) {
  const result = await tool.execute(timezone === undefined ? {} : { timezone }, ctx);
  expect(result.isError).toBeUndefined();
  return JSON.parse(result.content) as Record<string, string>;
}

describe('current_time', () => {
  it('defaults to UTC', async () => {
    expect(await timeIn()).toEqual({
      timezone: 'UTC',
      localTime: '2024-03-31T01:30:45+00:00',
      weekday: 'Sunday',
      utcOffset: '+00:00',
      utcTime: '2024-03-31T01:30:45Z',
    });
  });

  it('gives local time, weekday and offset in a zone, summer time included', async () => {
    expect(await timeIn('Europe/Berlin')).toMatchObject({
      timezone: 'Europe/Berlin',
      localTime: '2024-03-31T03:30:45+02:00',
      weekday: 'Sunday',
      utcOffset: '+02:00',
    });
    expect(await timeIn('America/New_York')).toMatchObject({
      localTime: '2024-03-30T21:30:45-04:00',
      weekday: 'Saturday',
    });
    expect(await timeIn('Asia/Kolkata')).toMatchObject({
      localTime: '2024-03-31T07:00:45+05:30',
      utcOffset: '+05:30',
    });
    expect(await timeIn('Pacific/Chatham')).toMatchObject({ utcOffset: '+13:45' });
  });

  it('names the zone canonically whatever its spelling', async () => {
    expect((await timeIn('europe/paris')).timezone).toBe('Europe/Paris');
  });

  it('answers an unknown zone with an error result', async () => {
    const result = await tool.execute({ timezone: 'Mars/Olympus_Mons' }, ctx);
    expect(result.isError).toBe(true);
    expect(result.content).toContain('Unknown time zone "Mars/Olympus_Mons"');
  });

  it('reads the clock at each call', async () => {
    let now = new Date('2024-01-01T00:00:00Z');
    const ticking = createCurrentTimeTool({ now: () => now });
    const first = JSON.parse((await ticking.execute({}, ctx)).content).utcTime;
    now = new Date('2024-01-02T00:00:00Z');
    const second = JSON.parse((await ticking.execute({}, ctx)).content).utcTime;
    expect([first, second]).toEqual(['2024-01-01T00:00:00Z', '2024-01-02T00:00:00Z']);
  });
});

const juneTool = createCurrentTimeTool({ now: () => new Date('2024-06-01T12:00:00Z') });

describe('current_time names the zone the model asked for', () => {
  // The reported name is Intl's resolvedOptions().timeZone, which on Node 20's
  // ICU is the CLDR canonical id: the deprecated IANA link names.
  it.each([
    ['Asia/Kolkata'],
    ['Europe/Kyiv'],
    ['Asia/Kathmandu'],
    ['Asia/Ho_Chi_Minh'],
    ['America/Nuuk'],
  ])('%s is reported under that name, not its old alias', async (zone) => {
    const result = await juneTool.execute({ timezone: zone }, ctx);
    expect(result.isError).toBeUndefined();
    expect(JSON.parse(result.content).timezone).toBe(zone);
  });
});
