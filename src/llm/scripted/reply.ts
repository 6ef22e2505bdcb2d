import type { ModelRequest } from '../types.js';
import { answerQuestion, summariseToolResults } from './answer.js';
import { classifyQuestion } from './classify.js';
import { countToolCalls, latestUserText, trailingToolResults } from './conversation.js';
import { CLASSIFY_MARKER, hasMarker, PLAN_MARKER } from './markers.js';
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
 * Decides the reply, a pure function of the request: a classification or a
 * plan when the system prompt carries its marker; tool calls when a rule
 * fires on a fresh user message; otherwise an answer (a summary when tool
 * results are waiting).
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
  const calls = toolCallsOf(request);
  if (calls.length > 0) return { kind: 'tool_calls', calls };
  const results = trailingToolResults(request.messages);
  const text = results.length > 0 ? summariseToolResults(results) : answerQuestion(question);
  return { kind: 'text', text };
}

/**
 * Tool calls only answer a user message: once its tool results are in, the
 * model answers instead of calling again (so a tool loop always ends). With
 * `toolChoice: 'required'` and no rule firing the model still answers: it
 * cannot invent arguments for an arbitrary tool.
 */
function toolCallsOf(request: ModelRequest): ScriptedToolCall[] {
  const tools = request.tools ?? [];
  const latest = request.messages.at(-1);
  if (request.toolChoice === 'none' || tools.length === 0 || latest?.role !== 'user') return [];
  const offered = new Set(tools.map((tool) => tool.name));
  // Numbered after the calls already in the conversation, so ids stay unique across turns.
  const firstNumber = countToolCalls(request.messages) + 1;
  return toolCallsFor(latest.content, offered).map((call, index) => ({
    id: `call_${firstNumber + index}`,
    ...call,
  }));
}
