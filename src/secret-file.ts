import { chmod, chown, rename, writeFile } from 'node:fs/promises';

export interface FileOwner {
  uid: number;
  gid: number;
}

/**
 * Writes a secret where only its owner can read it (0600), atomically: a
 * crash leaves the old file or the new one, never a truncated one. With
 * `owner`, the file is given to that OS user before it appears.
 */
export async function writeSecretFile(
  file: string,
  content: string,
  owner?: FileOwner,
): Promise<void> {
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, content, { mode: 0o600 });
  // The mode given to writeFile is masked by the umask; make it exact.
  await chmod(temporary, 0o600);
  if (owner) await chown(temporary, owner.uid, owner.gid);
  await rename(temporary, file);
}

/** Whether `name` is a temporary file writeSecretFile left for `base` (killed before its rename). */
export function isSecretFileLeftover(name: string, base: string): boolean {
  return name.startsWith(`${base}.`) && name.endsWith('.tmp');
}
