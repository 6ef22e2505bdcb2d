import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePorts } from '../../src/free-ports.js';

describe('freePorts', () => {
  it('picks distinct ports below the ephemeral range, where no outgoing connection takes one', async () => {
    const range = await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8');
    const ephemeralStart = Number(range.trim().split(/\s+/)[0]);

    const ports = await freePorts(50);

    expect(new Set(ports).size).toBe(50);
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(1024);
      expect(port).toBeLessThan(ephemeralStart);
    }
    // Each is free again once returned: a listen on it succeeds.
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(ports[0], '127.0.0.1', () => resolve());
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
});
