import { clip, wordsOf } from './conversation.js';

export interface PlanStage {
  id: string;
  title: string;
  goal: string;
  checkpoint: boolean;
  dependsOn: string[];
}

export interface Plan {
  goal: string;
  stages: PlanStage[];
}

const MIN_STAGES = 2;
const MAX_STAGES = 4;
/** Within the ExecutionPlan's bound on a goal (4000), however long the question. */
const MAX_GOAL_CHARS = 1000;

/**
 * A plan derived from the question's own structure: numbered steps, then
 * "then"-chains, then sentences; a question with one part gets the default
 * gather / analyse / synthesise plan. Stages run in order, each depending
 * on the one before, and the last-but-one pauses for review.
 */
export function planFor(question: string): Plan {
  const goal = clip(question, 300) || 'Answer the user question';
  const parts = splitIntoParts(question);
  const outlines =
    parts.length >= MIN_STAGES
      ? fitToMaxStages(parts).map((part) => ({ title: titleOf(part), goal: part }))
      : defaultOutlines(goal);
  const stages = outlines.map((outline, index) => ({
    id: `stage-${index + 1}`,
    title: outline.title,
    goal: clip(outline.goal, MAX_GOAL_CHARS),
    checkpoint: index === outlines.length - 2,
    dependsOn: index === 0 ? [] : [`stage-${index}`],
  }));
  return { goal, stages };
}

const NUMBERED_STEP = /(?:^|\s)(?:step\s*\d+\s*[:.)-]?|\d+[.)])\s+/i;
const SEQUENCE_WORD = /[,;]?\s*\b(?:and then|then|after that|afterwards|finally)\b[,:]?\s*/i;
const SENTENCE_END = /(?<=[.!?])\s+/;

function splitIntoParts(question: string): string[] {
  for (const separator of [NUMBERED_STEP, SEQUENCE_WORD, SENTENCE_END]) {
    const parts = question
      .split(new RegExp(separator.source, 'gi'))
      .map(cleanPart)
      .filter((part) => wordsOf(part).length > 0);
    if (parts.length >= MIN_STAGES) return parts;
  }
  return [];
}

/** Drops leading sequence words and trailing punctuation, then makes a sentence of it. */
function cleanPart(part: string): string {
  const stripped = part
    .replace(/^\s*(?:first(?:ly)?|and|next|also)\b[,:]?\s*/i, '')
    .replace(/[\s,;:.!?]+$/, '')
    .replace(/\s+/g, ' ')
    .trim();
  if (!stripped) return '';
  return `${stripped.charAt(0).toUpperCase()}${stripped.slice(1)}.`;
}

/** Extra parts are folded into the last stage rather than dropped. */
function fitToMaxStages(parts: string[]): string[] {
  if (parts.length <= MAX_STAGES) return parts;
  return [...parts.slice(0, MAX_STAGES - 1), parts.slice(MAX_STAGES - 1).join(' ')];
}

function defaultOutlines(goal: string): { title: string; goal: string }[] {
  return [
    { title: 'Gather the facts', goal: `Gather the facts needed to answer: ${goal}` },
    { title: 'Analyse the facts', goal: 'Analyse the gathered facts and note what they imply.' },
    { title: 'Synthesise the answer', goal: `Synthesise a clear answer to: ${goal}` },
  ];
}

function titleOf(stageGoal: string): string {
  const words = stageGoal.replace(/[.!?]+$/, '').split(/\s+/);
  return words.length <= 6 ? words.join(' ') : `${words.slice(0, 6).join(' ')}…`;
}
