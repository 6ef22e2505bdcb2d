import type { Config } from '../config.js';
import { type Catalogue, defaultCatalogue, type ProviderEntry } from './catalogue.js';

/**
 * The settings the model stack is built from, and their checks against the
 * catalogue they describe. loadConfig runs the checks with every other
 * variable's, so a default model that is not in the catalogue or a
 * provider's missing key stops the start before anything has started,
 * listed with the other problems.
 */

export type ModelSettings = Pick<
  Config,
  | 'OPENAI_API_KEY'
  | 'OPENAI_BASE_URL'
  | 'ANTHROPIC_API_KEY'
  | 'ANTHROPIC_BASE_URL'
  | 'WAYMARK_MODELS'
  | 'WAYMARK_DEFAULT_MODEL'
  | 'CLASSIFY_WITH_MODEL'
  | 'CLASSIFY_MODEL'
>;

/** What the SDKs are given for a server that needs no key: they refuse an empty one. */
export const NO_KEY_NEEDED = 'no-key-needed';

/**
 * The catalogue the settings describe: WAYMARK_MODELS, else the default one
 * of the vendors whose key or base URL is set, with WAYMARK_DEFAULT_MODEL
 * as its default. Assumes `modelSettingProblems` found nothing.
 */
export function resolveCatalogue(settings: ModelSettings): Catalogue {
  const catalogue = describedCatalogue(settings);
  return { ...catalogue, defaultModel: settings.WAYMARK_DEFAULT_MODEL ?? catalogue.defaultModel };
}

function describedCatalogue(settings: ModelSettings): Catalogue {
  return (
    settings.WAYMARK_MODELS ??
    defaultCatalogue({
      // A base URL alone is a server that needs no key (a local Ollama, vLLM).
      openai: Boolean(settings.OPENAI_API_KEY ?? settings.OPENAI_BASE_URL),
      anthropic: Boolean(settings.ANTHROPIC_API_KEY ?? settings.ANTHROPIC_BASE_URL),
    })
  );
}

/**
 * Every setting that does not fit the catalogue, one line each, starting
 * with the variable to fix: a default or classifier model it does not
 * have, a provider whose key variable is unset.
 */
export function modelSettingProblems(settings: ModelSettings, env: NodeJS.ProcessEnv): string[] {
  const catalogue = describedCatalogue(settings);
  const problems: string[] = [];
  const defaultProblem = unknownModelProblem(
    'WAYMARK_DEFAULT_MODEL',
    settings.WAYMARK_DEFAULT_MODEL,
    catalogue,
  );
  if (defaultProblem) problems.push(defaultProblem);
  if (settings.CLASSIFY_WITH_MODEL) {
    const classifyProblem = unknownModelProblem(
      'CLASSIFY_MODEL',
      settings.CLASSIFY_MODEL,
      catalogue,
    );
    if (classifyProblem) problems.push(classifyProblem);
  }
  for (const provider of catalogue.providers) {
    const key = providerKeyOf(provider, { settings, env });
    if ('problem' in key) problems.push(key.problem);
  }
  return problems;
}

/** The line for a variable naming a model the catalogue does not have; undefined when it has it, or the variable is unset. */
export function unknownModelProblem(
  variable: string,
  name: string | undefined,
  catalogue: Pick<Catalogue, 'models'>,
): string | undefined {
  if (name === undefined || catalogue.models.some((model) => model.name === name)) {
    return undefined;
  }
  return `${variable}: "${name}" is not in the catalogue (${catalogue.models.map((m) => m.name).join(', ')})`;
}

/**
 * A provider's key. A provider naming its variable (`apiKeyEnv`) gets that
 * variable's value, and one unset is a problem: borrowing another key
 * would send it where it does not belong. Otherwise the vendor's usual
 * variable, but only for a provider without a `baseUrl` of its own, which
 * calls the vendor (or the vendor's base URL variable set beside that
 * key): an OpenAI key sent to a catalogue's Ollama or OpenRouter entry
 * reaches a server that has no business holding it. A server that needs no
 * key (a local Ollama, vLLM) gets a placeholder. A scripted provider needs
 * none.
 */
export function providerKeyOf(
  provider: ProviderEntry,
  options: { settings: ModelSettings; env: NodeJS.ProcessEnv },
): { key: string } | { problem: string } {
  if (provider.kind === 'scripted') return { key: NO_KEY_NEEDED };
  if (provider.apiKeyEnv) {
    const named = options.env[provider.apiKeyEnv]?.trim();
    if (named) return { key: named };
    return {
      problem: `${provider.apiKeyEnv}: not set; provider "${provider.name}" reads its key from it (apiKeyEnv)`,
    };
  }
  if (provider.baseUrl) return { key: NO_KEY_NEEDED };
  const vendor = vendorVariables(provider.kind, options.settings);
  if (vendor.key) return { key: vendor.key };
  if (vendor.baseUrl) return { key: NO_KEY_NEEDED };
  return {
    problem: `${vendor.keyVariable}: provider "${provider.name}" needs a key: set ${vendor.keyVariable}, or name its variable in the provider's apiKeyEnv`,
  };
}

/** The vendor's own key and base URL variables, used by its providers without a baseUrl of their own. */
function vendorVariables(
  kind: 'openai' | 'anthropic',
  settings: ModelSettings,
): { keyVariable: string; key: string | undefined; baseUrl: string | undefined } {
  return kind === 'openai'
    ? {
        keyVariable: 'OPENAI_API_KEY',
        key: settings.OPENAI_API_KEY,
        baseUrl: settings.OPENAI_BASE_URL,
      }
    : {
        keyVariable: 'ANTHROPIC_API_KEY',
        key: settings.ANTHROPIC_API_KEY,
        baseUrl: settings.ANTHROPIC_BASE_URL,
      };
}
