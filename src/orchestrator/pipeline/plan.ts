import { z } from 'zod';
import { expectedOutputSchema } from './expected-output.js';

/**
 * The ExecutionPlan: the planner's ordered list of stages for a pipeline.
 * Stages run one after the other in plan order; `dependsOn` says which
 * earlier results a stage is given (all earlier ones when absent), and may
 * name earlier stages only, so a plan can never have a cycle.
 */

/** Plans the planner may make unless configured otherwise; a `modify` plan patch has the same bound. */
export const DEFAULT_MAX_STAGES = 12;

/** Stage ids name event steps and appear in URLs' JSON: short, no spaces, no markup. */
const STAGE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export interface PlanLimits {
  /** The benchmark plans 200 stages; the service default is DEFAULT_MAX_STAGES. */
  maxStages: number;
  /** The tools the workflow offers; when given, a stage's `tools` may name only these. */
  toolNames?: readonly string[];
}

export const planStageSchema = z.object({
  id: z
    .string()
    .trim()
    .regex(STAGE_ID, 'a stage id is 1-64 letters, digits, "-", "_" or ".", e.g. "stage-1"'),
  title: z.string().trim().min(1).max(200),
  goal: z.string().trim().min(1).max(4000),
  /** Tool names the stage's sub-agent is offered; all of the workflow's tools when absent. */
  tools: z.array(z.string().trim().min(1)).max(50).optional(),
  dependsOn: z.array(z.string().trim()).optional(),
  /** Defaults to false: a model leaving it out means no pause, not an invalid plan. */
  checkpoint: z.boolean().default(false),
  expectedOutput: expectedOutputSchema.optional(),
});

export type PlanStage = z.infer<typeof planStageSchema>;
export interface ExecutionPlan {
  stages: PlanStage[];
  /**
   * The tools its stages could name when it was made (`PlanLimits.toolNames`),
   * so a `modify` plan is checked against the same list. Absent in plans
   * saved before 2026-12-03: their modify plans' tools are not checked.
   */
  toolNames?: string[];
}

/** The plan schema for the given bounds; extra keys a model adds (a `goal`, say) are dropped. */
export function executionPlanSchema(limits: PlanLimits) {
  return z
    .object({
      stages: z
        .array(planStageSchema)
        .min(1, 'a plan has at least one stage')
        .max(
          limits.maxStages,
          `a plan has at most ${limits.maxStages} stages: merge related stages`,
        ),
    })
    .superRefine(
      (plan, context) => {
        for (const { path, message } of referenceIssues(looseStages(plan), limits)) {
          context.addIssue({ code: 'custom', path, message });
        }
      },
      // Also when a stage is malformed: the model gets one repair turn, so it
      // should hear about every problem in it, not only the first kind.
      { when: () => true },
    );
}

/**
 * What the reference checks read of a stage, taken leniently from a value
 * that may have failed the shape checks; a field of the wrong type is
 * treated as absent (the shape checks report it).
 */
interface LooseStage {
  id: string | undefined;
  dependsOn: string[];
  tools: string[];
  format: unknown;
  consistentWith: string[];
}

function looseStages(plan: unknown): LooseStage[] {
  const stages = isRecord(plan) && Array.isArray(plan.stages) ? plan.stages : [];
  return stages.map((stage: unknown) => {
    const fields = isRecord(stage) ? stage : {};
    const output = isRecord(fields.expectedOutput) ? fields.expectedOutput : {};
    return {
      id: typeof fields.id === 'string' ? fields.id.trim() : undefined,
      dependsOn: strings(fields.dependsOn),
      tools: strings(fields.tools),
      format: output.format,
      consistentWith: strings(output.consistentWith),
    };
  });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
  return Array.isArray(value)
    ? value.map((item) => (typeof item === 'string' ? item.trim() : ''))
    : [];
}

interface ReferenceIssue {
  path: (string | number)[];
  message: string;
}

/** Unique ids; `dependsOn` and `consistentWith` point backwards only; tools exist. */
function referenceIssues(stages: LooseStage[], limits: PlanLimits): ReferenceIssue[] {
  const issues: ReferenceIssue[] = [];
  const issue = (path: (string | number)[], message: string) =>
    issues.push({ path: ['stages', ...path], message });
  const allIds = new Set(stages.map((stage) => stage.id));
  const earlier = new Map<string, LooseStage>();
  const offered = limits.toolNames ? new Set(limits.toolNames) : undefined;
  const where = (reference: string) =>
    allIds.has(reference)
      ? `"${reference}" is not an earlier stage: a stage may refer to earlier stages only`
      : `"${reference}" is not a stage of this plan`;
  for (const [index, stage] of stages.entries()) {
    if (stage.id !== undefined && earlier.has(stage.id)) {
      issue([index, 'id'], `duplicate stage id "${stage.id}"`);
    }
    for (const [at, dependency] of stage.dependsOn.entries()) {
      if (!earlier.has(dependency)) issue([index, 'dependsOn', at], where(dependency));
    }
    for (const [at, reference] of stage.consistentWith.entries()) {
      const target = earlier.get(reference);
      if (!target) issue([index, 'expectedOutput', 'consistentWith', at], where(reference));
      else if (target.format !== 'json') {
        issue(
          [index, 'expectedOutput', 'consistentWith', at],
          `stage "${reference}" does not declare expectedOutput format "json", so there are no fields to compare`,
        );
      }
    }
    for (const [at, tool] of stage.tools.entries()) {
      if (offered && !offered.has(tool)) {
        issue(
          [index, 'tools', at],
          `unknown tool "${tool}"; available: ${[...offered].join(', ') || 'none'}`,
        );
      }
    }
    if (stage.id !== undefined && !earlier.has(stage.id)) earlier.set(stage.id, stage);
  }
  return issues;
}

export type PlanParse = { ok: true; plan: ExecutionPlan } | { ok: false; issues: string[] };

/** Who made a plan revision: the planner (revision 1), or a user's `modify` with a plan. */
export type PlanSource = 'planner' | 'modify';

/**
 * What a `plan` `completed` event says of a revision: the whole plan's
 * stages, the kept ones too, so a client draws the pipeline from the latest
 * `plan` event alone, whoever made it.
 */
export function planEventDetail(revision: number, plan: ExecutionPlan, source: PlanSource) {
  return { revision, source, stages: plan.stages };
}

/** Validates a candidate plan; the issues are short lines meant to be quoted back to the model or client. */
export function parsePlan(value: unknown, limits: PlanLimits): PlanParse {
  const parsed = executionPlanSchema(limits).safeParse(value);
  if (!parsed.success) return { ok: false, issues: formatIssues(parsed.error) };
  const { toolNames } = limits;
  return {
    ok: true,
    plan: { stages: parsed.data.stages, ...(toolNames ? { toolNames: [...toolNames] } : {}) },
  };
}

/** `stages[2].dependsOn[0]: "x" is not a stage of this plan` */
export function formatIssues(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    const path = issue.path
      .map((key, index) =>
        typeof key === 'number' ? `[${key}]` : `${index === 0 ? '' : '.'}${String(key)}`,
      )
      .join('');
    return path ? `${path}: ${issue.message}` : issue.message;
  });
}

/**
 * A `modify` plan patch: the stages up to and including `currentStageId`
 * stay (they have run), `replacement.stages` follow them, and the result is
 * validated like a planned plan, against the tools the plan was made with,
 * so a replacement stage may depend on any kept one but no kept stage
 * changes. No replacement stages drops the ones after the current stage:
 * the plan still has that one, so it is never empty.
 */
export function replaceStagesAfter(
  plan: ExecutionPlan,
  currentStageId: string,
  replacement: unknown,
  bounds: Pick<PlanLimits, 'maxStages'>,
): PlanParse {
  const limits: PlanLimits = {
    maxStages: bounds.maxStages,
    ...(plan.toolNames ? { toolNames: plan.toolNames } : {}),
  };
  const current = plan.stages.findIndex((stage) => stage.id === currentStageId);
  if (current < 0) return { ok: false, issues: [`"${currentStageId}" is not a stage of the plan`] };
  const patch = z.object({ stages: z.array(z.unknown()) }).safeParse(replacement);
  if (!patch.success) return { ok: false, issues: formatIssues(patch.error) };
  const kept = plan.stages.slice(0, current + 1);
  const parsed = parsePlan({ stages: [...kept, ...patch.data.stages] }, limits);
  if (parsed.ok) return parsed;
  // Point the issues at the client's own list: its first stage is stages[0] of the patch.
  return { ok: false, issues: parsed.issues.map((line) => shiftStageIndex(line, -kept.length)) };
}

function shiftStageIndex(line: string, by: number): string {
  return line.replace(/^stages\[(\d+)\]/, (_, index: string) => `stages[${Number(index) + by}]`);
}

/**
 * The plan as persisted (`workflow_plans.plan`). Versioned like the tool
 * loop's turns: a new shape gets a new `schemaVersion` and a frozen fixture
 * (test/fixtures/pipeline-plan-v1*.json). Loading checks the shape only, not
 * the bounds: a plan saved under a larger PIPELINE max stays readable.
 *
 * `toolNames` was added to version 1 as an optional key rather than as a
 * version 2: a replica of the version before reads such a plan (zod drops
 * the key) where it would fail a workflow on a version it does not know,
 * so replicas of both versions can run side by side during an upgrade.
 */
export const storedPlanV1 = z.object({
  schemaVersion: z.literal(1),
  stages: z.array(planStageSchema),
  toolNames: z.array(z.string()).optional(),
});
export type StoredPlan = z.infer<typeof storedPlanV1>;

export const storedPlanSchema = z.discriminatedUnion('schemaVersion', [storedPlanV1]);

export function toStoredPlan(plan: ExecutionPlan): StoredPlan {
  return {
    schemaVersion: 1,
    stages: plan.stages,
    ...(plan.toolNames ? { toolNames: plan.toolNames } : {}),
  };
}

export function parseStoredPlan(value: unknown): ExecutionPlan {
  const stored = storedPlanSchema.parse(value);
  return {
    stages: stored.stages,
    ...(stored.toolNames ? { toolNames: stored.toolNames } : {}),
  };
}
