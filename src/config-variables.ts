import type { Config } from './config.js';

/** How the environment's variables are read beyond their values: renamed ones, secret ones. */

/**
 * Variables earlier versions read, by their new names. One still set fails
 * the start: ignoring it would silently drop the operator's setting.
 */
const RENAMED_VARIABLES: Readonly<Record<string, keyof Config>> = {
  LOOP_MAX_ITERATIONS: 'BUDGET_MAX_ITERATIONS',
};

export function renamedVariablesIn(env: NodeJS.ProcessEnv): string[] {
  return Object.entries(RENAMED_VARIABLES)
    .filter(([old]) => (env[old] ?? '').trim() !== '')
    .map(([old, now]) => `${old}: renamed to ${now}; set that instead`);
}

/** A variable whose value a configuration problem never quotes. */
export function isSecretVariable(name: string): boolean {
  return (
    name === 'DATABASE_URL' ||
    name === 'DATABASE_LISTEN_URL' ||
    name.endsWith('_API_KEY') ||
    name === 'WAYMARK_MODELS'
  );
}
