import { describe, expect, it } from 'vitest';
import { createMetricsRegistry } from '../../src/metrics/registry.js';

/** The Prometheus text format the registry writes. */

describe('the metrics registry', () => {
  it('writes HELP and TYPE once per family, histogram buckets cumulative with +Inf equal to _count', () => {
    const registry = createMetricsRegistry();
    const requests = registry.counter({
      name: 'r_total',
      help: 'Requests.',
      labelNames: ['route'],
    });
    const durations = registry.histogram({
      name: 'd_seconds',
      help: 'Durations.',
      labelNames: ['route'],
      buckets: [1, 0.1, 10],
    });
    requests.inc({ route: '/a' });
    requests.inc({ route: '/b' }, 2);
    for (const value of [0.05, 0.5, 0.5, 20]) durations.observe({ route: '/a' }, value);
    expect(registry.render()).toBe(
      [
        '# HELP r_total Requests.',
        '# TYPE r_total counter',
        'r_total{route="/a"} 1',
        'r_total{route="/b"} 2',
        '# HELP d_seconds Durations.',
        '# TYPE d_seconds histogram',
        'd_seconds_bucket{route="/a",le="0.1"} 1',
        'd_seconds_bucket{route="/a",le="1"} 3',
        'd_seconds_bucket{route="/a",le="10"} 3',
        'd_seconds_bucket{route="/a",le="+Inf"} 4',
        'd_seconds_sum{route="/a"} 21.05',
        'd_seconds_count{route="/a"} 4',
        '',
      ].join('\n'),
    );
  });

  it('escapes backslashes, quotes and line feeds in label values', () => {
    const registry = createMetricsRegistry();
    registry
      .counter({ name: 'c_total', help: 'A help\nwith a line feed.', labelNames: ['model'] })
      .inc({ model: 'a"b\\c\nd' });
    expect(registry.render()).toContain('c_total{model="a\\"b\\\\c\\nd"} 1');
    expect(registry.render()).toContain('# HELP c_total A help\\nwith a line feed.');
  });

  it('a counter never falls: negative and non-finite amounts are ignored', () => {
    const registry = createMetricsRegistry();
    const counter = registry.counter({ name: 'c_total', help: 'C.', labelNames: [] });
    counter.inc({}, 3);
    counter.inc({}, -1);
    counter.inc({}, Number.NaN);
    counter.inc({}, Number.POSITIVE_INFINITY);
    expect(registry.render()).toContain('c_total 3\n');
  });

  it('refuses a family declared twice', () => {
    const registry = createMetricsRegistry();
    registry.counter({ name: 'c_total', help: 'C.', labelNames: [] });
    expect(() => registry.gauge({ name: 'c_total', help: 'C.', labelNames: [] })).toThrow(
      /declared twice/,
    );
  });
});
