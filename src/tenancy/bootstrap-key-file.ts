import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { writeSecretFile } from '../secret-file.js';

export const ADMIN_KEY_FILE = 'admin-key';

/**
 * Saves the bootstrap admin key where only its owner can read it (0600),
 * atomically, so a crash never leaves a truncated key behind.
 */
export async function saveBootstrapKey(dataDir: string, secret: string): Promise<string> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const file = path.join(dataDir, ADMIN_KEY_FILE);
  await writeSecretFile(file, `${secret}\n`);
  return file;
}
