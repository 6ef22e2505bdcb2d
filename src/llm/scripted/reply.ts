import type { ModelRequest } from '../types.js';
import { answerQuestion, summariseToolResults } from './answer.js';
import { classifyQuestion } from './classify.js';
import { countToolCalls, latestUserText, trailingToolResults } from './conversation.js';
import {
  CLASSIFY_MARKER,
  hasMarker,
  PLAN_MARKER,
  STAGE_MARKER,
  SYNTHESIS_MARKER,
} from './markers.js';
import { answerStage, stageTurnOf, synthesise } from './pipeline.js';
import { planFor } from './plan.js';
import { toolCallsFor } from './tool-rules.js';

/** What the scripted model sends back for a request, before it is streamed. */
export type ScriptedReply =
  | { kind: 'text'; text: string }
  | { kind: 'tool_calls'; calls: ScriptedToolCall[] };

/** A tool call as the model emits it: validated against the tool's schema when streamed. */
export interface ScriptedToolCall {
  id: string;
  name: string;
  rawArguments: string;
}

/**
 * Decides the reply, a pure function of the request: a classification, a
 * plan or a synthesis when the system prompt carries its marker; tool calls
 * when a rule fires on a fresh user message (in a pipeline stage, on its
 * goal); otherwise an answer (a summary when tool results are waiting).
 */
export function replyTo(request: ModelRequest): ScriptedReply {
  const stable = request.system?.stable;
  const question = latestUserText(request.messages);
  if (hasMarker(stable, CLASSIFY_MARKER)) {
    return { kind: 'text', text: JSON.stringify(classifyQuestion(question)) };
  }
  if (hasMarker(stable, PLAN_MARKER)) {
    return { kind: 'text', text: JSON.stringify(planFor(question)) };
  }
  if (hasMarker(stable, SYNTHESIS_MARKER)) return { kind: 'text', text: synthesise(question) };
  // A stage's message also quotes the question and earlier results, which are not its work.
  const stage = hasMarker(stable, STAGE_MARKER) ? stageTurnOf(question) : undefined;
  const calls = toolCallsOf(request, stage?.goal);
  if (calls.length > 0) return { kind: 'tool_calls', calls };
  const results = trailingToolResults(request.messages);
  if (results.length > 0) return { kind: 'text', text: summariseToolResults(results) };
  return { kind: 'text', text: stage ? answerStage(stage) : answerQuestion(question) };
}

/**
 * Tool calls only answer a user message: once its tool results are in, the
 * model answers instead of calling again (so a tool loop always ends). With
 * `toolChoice: 'required'` and no rule firing the model still answers: it
 * cannot invent arguments for an arbitrary tool.
 */
function toolCallsOf(request: ModelRequest, stageGoal: string | undefined): ScriptedToolCall[] {
  const tools = request.tools ?? [];
  const latest = request.messages.at(-1);
  if (request.toolChoice === 'none' || tools.length === 0 || latest?.role !== 'user') return [];
  const offered = new Set(tools.map((tool) => tool.name));
  // Numbered after the calls already in the conversation, so ids stay unique across turns.
  const firstNumber = countToolCalls(request.messages) + 1;
  return toolCallsFor(stageGoal ?? latest.content, offered).map((call, index) => ({
    id: `call_${firstNumber + index}`,
    ...call,
  }));
}
