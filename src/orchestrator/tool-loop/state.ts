import { z } from 'zod';
import type { Message } from '../../llm/types.js';

/**
 * The persisted state of one completed tool-loop turn: the assistant
 * message with its tool calls and the results of those calls. One row per
 * turn (table `workflow_turns`), parsed with zod on load. A new shape gets
 * a new `schemaVersion` and a frozen fixture in test/fixtures; old versions
 * stay readable here.
 */

const toolCallV1 = z.object({
  id: z.string(),
  name: z.string(),
  arguments: z.unknown(),
});

const toolResultV1 = z.object({
  toolCallId: z.string(),
  toolName: z.string(),
  /** As the model saw it: wrapped as untrusted output, guard warnings included. */
  content: z.string(),
  isError: z.boolean(),
});

export const turnStateV1 = z.object({
  schemaVersion: z.literal(1),
  turn: z.number().int().min(1),
  /** Catalogue name of the model that answered the turn. */
  model: z.string(),
  assistant: z.object({
    content: z.string(),
    toolCalls: z.array(toolCallV1),
  }),
  toolResults: z.array(toolResultV1),
  /**
   * The call of a pausing tool (ask_user) still waiting for the user's
   * answer, which becomes its result when the loop resumes; null otherwise.
   */
  awaiting: z.object({ toolCallId: z.string(), toolName: z.string() }).nullable(),
  finishReason: z.string().nullable(),
});

export type TurnStateV1 = z.infer<typeof turnStateV1>;
export type TurnState = TurnStateV1;

/** Every version this build reads, by `schemaVersion`. */
export const turnStateSchema = z.discriminatedUnion('schemaVersion', [turnStateV1]);

export function parseTurnState(value: unknown): TurnState {
  return turnStateSchema.parse(value);
}

/**
 * The messages of one turn, in the order the model saw them. A turn that
 * paused leaves its `awaiting` call without a result: the resume appends
 * the user's answer as that result before the next turn.
 */
export function messagesOfTurn(state: TurnState): Message[] {
  return [
    {
      role: 'assistant',
      content: state.assistant.content,
      toolCalls: state.assistant.toolCalls.map((call) => ({ ...call })),
    },
    ...state.toolResults.map(
      (result): Message => ({
        role: 'tool',
        toolCallId: result.toolCallId,
        toolName: result.toolName,
        content: result.content,
        isError: result.isError,
      }),
    ),
  ];
}
