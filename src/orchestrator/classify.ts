import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config.js';
import type { Catalogue } from '../llm/catalogue.js';
import { unknownModelProblem } from '../llm/model-settings.js';
import type { NewEventRow } from '../store/workflow-events.js';
import { workflowsRepository } from '../store/workflows.js';
import type { WorkflowTracker } from '../tracker/tracker.js';
import type {
  WorkflowEvent,
  WorkflowKind,
  WorkflowMode,
  WorkflowUsage,
} from '../workflows/types.js';
import {
  compileKeywords,
  DEFAULT_COMPLEX_KEYWORDS,
  type KeywordMatcher,
} from './classify-keywords.js';
import { askModel, type ModelCheck, type ModelCheckOutcome } from './classify-model.js';

/**
 * Complexity detection: decides whether a workflow takes the simple path
 * (one tool loop) or the complex one (a pipeline). The request's `mode`
 * overrides everything; otherwise the keyword heuristic decides, unless the
 * model check is enabled and gives a usable answer. The check can only
 * improve the decision: when it fails or answers nonsense, the keywords
 * decide and the reason says why.
 */

export type { ModelCheck } from './classify-model.js';

export type ClassificationMethod = 'mode' | 'keywords' | 'model';

export interface Classification {
  kind: WorkflowKind;
  method: ClassificationMethod;
  /** Human-readable, shown in the `classification` event, e.g. `matched "compare" and "for each"`. */
  reason: string;
  /** What the model check's call used and cost, when its provider reported usage. */
  usage?: WorkflowUsage;
}

export interface ClassifyOptions {
  input: string;
  mode: WorkflowMode;
  keywords: KeywordMatcher;
  /** Given only when the model check is enabled (see `classifierSettings`). */
  modelCheck?: ModelCheck;
  /** Where a failed model check is logged (its reason only says that it failed). */
  log?: Logger;
}

export async function classifyQuestion(options: ClassifyOptions): Promise<Classification> {
  if (options.mode !== 'auto' || !options.modelCheck) {
    return classifyByRequestOrKeywords(options.input, options.mode, options.keywords);
  }
  const heuristic = options.keywords.classify(options.input);
  const keywordReason = describeMatches(heuristic.matched);
  const outcome = await askModel(options.modelCheck, options.input);
  const usage = outcome.usage ? { usage: outcome.usage } : {};
  if (outcome.status === 'answered') {
    return {
      kind: outcome.kind,
      method: 'model',
      reason: `model "${outcome.model}" answered ${outcome.kind} (keywords: ${keywordReason})`,
      ...usage,
    };
  }
  if (outcome.status === 'failed') {
    options.log?.warn({ err: outcome.error }, 'the classification model check failed');
  }
  return {
    kind: heuristic.kind,
    method: 'keywords',
    reason: `${describeFallback(outcome)}, so the keywords decided: ${keywordReason}`,
    ...usage,
  };
}

function describeMatches(matched: string[]): string {
  if (matched.length === 0) return 'no complexity keyword matched';
  const quoted = matched.map((keyword) => `"${keyword}"`);
  const last = quoted.pop();
  return quoted.length === 0 ? `matched ${last}` : `matched ${quoted.join(', ')} and ${last}`;
}

function describeFallback(outcome: Exclude<ModelCheckOutcome, { status: 'answered' }>): string {
  switch (outcome.status) {
    case 'failed':
      return `the model check failed because ${outcome.problem}`;
    case 'unusable': {
      // Cut between characters (code points), never inside one: half of an
      // emoji is no text PostgreSQL stores, and the event's write would fail.
      const flat = [...outcome.answer.replace(/\s+/g, ' ').trim()];
      const shown = flat.length > 40 ? `${flat.slice(0, 39).join('')}…` : flat.join('');
      return `model "${outcome.model}" gave no usable answer (${shown ? `"${shown}"` : 'empty'})`;
    }
  }
}

/**
 * The decision when it needs no model (the request's mode, or the keywords
 * when the model check is off), else undefined: the run's first transition
 * can then carry it, rather than a transaction of its own.
 */
export function classifyWithoutModel(options: {
  input: string;
  mode: WorkflowMode;
  settings: ClassifierSettings;
}): Classification | undefined {
  if (options.mode === 'auto' && options.settings.checkModel !== undefined) return undefined;
  return classifyByRequestOrKeywords(options.input, options.mode, options.settings.keywords);
}

function classifyByRequestOrKeywords(
  input: string,
  mode: WorkflowMode,
  keywords: KeywordMatcher,
): Classification {
  if (mode !== 'auto') {
    return { kind: mode, method: 'mode', reason: `the request set mode "${mode}"` };
  }
  const heuristic = keywords.classify(input);
  return { kind: heuristic.kind, method: 'keywords', reason: describeMatches(heuristic.matched) };
}

/** The `classification` event of a decision, with the model check's `usage` as a model call's event carries it. */
export function classificationEvent(classification: Classification): NewEventRow {
  const { kind, method, reason, usage } = classification;
  return {
    type: 'classification',
    step: 'classify',
    status: 'completed',
    detail: { kind, method, reason, ...(usage ? { usage } : {}) },
    elapsedMs: null,
  };
}

/**
 * Records the decision: the workflow's `classification` event, and its
 * `kind` on the workflow row in the same transaction, so a resumed run
 * takes the same path without classifying again.
 */
export function recordClassification(
  tracker: Pick<WorkflowTracker, 'record'>,
  classification: Classification,
  workflow: { tenantId: string; id: string },
): Promise<WorkflowEvent> {
  return tracker.record(classificationEvent(classification), (tx) =>
    workflowsRepository(tx).setKind(workflow.tenantId, workflow.id, classification.kind),
  );
}

export interface ClassifierSettings {
  keywords: KeywordMatcher;
  /** Catalogue name of the model asked, or undefined when the model check is off. */
  checkModel: string | undefined;
}

/**
 * The classifier's configuration, built once at startup: the compiled
 * keyword list, and the check model (CLASSIFY_MODEL, else the catalogue's
 * default) when CLASSIFY_WITH_MODEL is on. An unknown CLASSIFY_MODEL stops
 * the start (loadConfig reports it) rather than failing every check later.
 */
export function classifierSettings(
  config: Pick<Config, 'CLASSIFY_COMPLEX_KEYWORDS' | 'CLASSIFY_WITH_MODEL' | 'CLASSIFY_MODEL'>,
  catalogue: Pick<Catalogue, 'models' | 'defaultModel'>,
): ClassifierSettings {
  const keywords = compileKeywords(config.CLASSIFY_COMPLEX_KEYWORDS ?? DEFAULT_COMPLEX_KEYWORDS);
  if (!config.CLASSIFY_WITH_MODEL) return { keywords, checkModel: undefined };
  const checkModel = config.CLASSIFY_MODEL ?? catalogue.defaultModel;
  const problem = unknownModelProblem('CLASSIFY_MODEL', checkModel, catalogue);
  if (problem) throw new ConfigError([problem]);
  return { keywords, checkModel };
}
