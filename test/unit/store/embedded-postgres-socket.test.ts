import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { socketFolder } from '../../../src/store/embedded-postgres.js';

describe('socketFolder', () => {
  it('is `socket` in the data folder, made absolute', () => {
    expect(socketFolder('/var/lib/waymark', 5432)).toBe('/var/lib/waymark/socket');
    expect(socketFolder('.waymark', 5432)).toBe(path.resolve('.waymark', 'socket'));
  });

  it('is none when the socket’s path would pass 103 bytes, counting the port in its name', () => {
    // `/socket/.s.PGSQL.5432` adds 21 bytes to the data folder.
    const fits = `/${'d'.repeat(81)}`;
    expect(Buffer.byteLength(path.join(fits, 'socket', '.s.PGSQL.5432'))).toBe(103);
    expect(socketFolder(fits, 5432)).toBe(`${fits}/socket`);
    expect(socketFolder(fits, 54321)).toBeUndefined();
    expect(socketFolder(`/${'d'.repeat(82)}`, 5432)).toBeUndefined();
    // Counted in bytes: each é is two.
    expect(socketFolder(`/${'é'.repeat(41)}`, 5432)).toBeUndefined();
  });

  it('is none for a folder with a double quote, which the server’s list of folders cannot hold', () => {
    expect(socketFolder('/srv/"waymark"', 5432)).toBeUndefined();
  });
});
