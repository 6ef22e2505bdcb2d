import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

export const ADMIN_KEY_FILE = 'admin-key';

/**
 * Saves the bootstrap admin key where only its owner can read it (0600),
 * atomically, so a crash never leaves a truncated key behind.
 */
export async function saveBootstrapKey(dataDir: string, secret: string): Promise<string> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const file = path.join(dataDir, ADMIN_KEY_FILE);
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, `${secret}\n`, { mode: 0o600 });
  // The mode given to writeFile is masked by the umask; make it exact.
  await chmod(temporary, 0o600);
  await rename(temporary, file);
  return file;
}
