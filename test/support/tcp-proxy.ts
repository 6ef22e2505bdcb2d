import net from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL whose link can be cut and restored,
 * to see what the service does while its database cannot be reached: cut,
 * its open connections are reset and new ones refused (nothing listens on
 * the port); restored, it listens again on the same port.
 */
export interface TcpProxy {
  /** `url` with its host and port replaced by the proxy's (and no socket folder in `host`). */
  through(url: string): string;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      open.add(from);
      from.pipe(to);
      from.on('error', () => to.destroy());
      from.on('close', () => {
        open.delete(from);
        to.destroy();
      });
    }
  });
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve((server.address() as net.AddressInfo).port);
      });
    });
  const port = await listen(0);
  const cut = async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of open) socket.resetAndDestroy();
    await closed;
  };
  return {
    through(url) {
      const proxied = new URL(url);
      proxied.hostname = '127.0.0.1';
      proxied.port = String(port);
      // The embedded server's URL names its Unix-domain socket, which would pass the proxy by.
      proxied.searchParams.delete('host');
      return proxied.toString();
    },
    cut,
    async restore() {
      await listen(port);
    },
    async close() {
      if (server.listening) await cut();
    },
  };
}
