import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.js';
import { LlmError } from '../../../src/llm/errors.js';
import type { RouterCall } from '../../../src/llm/router/router.js';
import { CLASSIFY_MARKER } from '../../../src/llm/scripted/markers.js';
import type { StreamPart } from '../../../src/llm/types.js';
import {
  classifierSettings,
  classifyQuestion,
  type ModelCheck,
  recordClassification,
} from '../../../src/orchestrator/classify.js';
import {
  compileKeywords,
  DEFAULT_COMPLEX_KEYWORDS,
} from '../../../src/orchestrator/classify-keywords.js';
import {
  CLASSIFY_SYSTEM_PROMPT,
  parseComplexityAnswer,
} from '../../../src/orchestrator/classify-model.js';

const keywords = compileKeywords(DEFAULT_COMPLEX_KEYWORDS);

/** A router stand-in: answers every call with `reply` by the model asked, and records the calls. */
function fakeRouter(reply: (call: RouterCall) => AsyncGenerator<StreamPart>) {
  const calls: RouterCall[] = [];
  return {
    calls,
    stream(call: RouterCall) {
      calls.push(call);
      return Object.assign(reply(call), { model: call.model });
    },
  };
}

async function* answer(text: string): AsyncGenerator<StreamPart> {
  yield { type: 'text-delta', text };
  yield { type: 'finish', reason: 'stop', providerReason: 'stop' };
}

function check(router: ModelCheck['router'], extra: Partial<ModelCheck> = {}): ModelCheck {
  return {
    router,
    model: 'cheap',
    signal: new AbortController().signal,
    context: { tenantId: 't1' },
    ...extra,
  };
}

describe('classifyQuestion', () => {
  it('lets the request mode override keywords and the model check', async () => {
    const router = fakeRouter(() => answer('simple'));
    const result = await classifyQuestion({
      input: 'What time is it?',
      mode: 'complex',
      keywords,
      modelCheck: check(router),
    });
    expect(result).toEqual({
      kind: 'complex',
      method: 'mode',
      reason: 'the request set mode "complex"',
    });
    expect(router.calls).toHaveLength(0);

    const simple = await classifyQuestion({ input: 'Compare A, then B', mode: 'simple', keywords });
    expect(simple).toMatchObject({ kind: 'simple', method: 'mode' });
  });

  it('uses the keywords when the model check is off, naming what matched', async () => {
    expect(
      await classifyQuestion({ input: 'Compare X for each Y', mode: 'auto', keywords }),
    ).toEqual({ kind: 'complex', method: 'keywords', reason: 'matched "compare" and "for each"' });
    expect(
      await classifyQuestion({ input: 'Pivot, compare, then stop', mode: 'auto', keywords }),
    ).toMatchObject({ reason: 'matched "pivot", "compare" and "then"' });
    expect(await classifyQuestion({ input: 'What is 2+2?', mode: 'auto', keywords })).toEqual({
      kind: 'simple',
      method: 'keywords',
      reason: 'no complexity keyword matched',
    });
  });

  it('lets a parsable model answer decide, over the keywords', async () => {
    const router = fakeRouter(() => answer('Complex.'));
    const result = await classifyQuestion({
      input: 'What is 2+2?',
      mode: 'auto',
      keywords,
      modelCheck: check(router),
    });
    expect(result).toEqual({
      kind: 'complex',
      method: 'model',
      reason: 'model "cheap" answered complex (keywords: no complexity keyword matched)',
    });
    const [call] = router.calls;
    expect(call?.model).toBe('cheap');
    expect(call?.request.maxOutputTokens).toBe(10);
    expect(call?.request.tools).toBeUndefined();
    expect(call?.request.messages).toEqual([{ role: 'user', content: 'What is 2+2?' }]);
    expect(call?.request.system?.stable.split('\n')).toContain(CLASSIFY_MARKER);
    expect(call?.context).toEqual({ tenantId: 't1' });
  });

  it('falls back to the keywords when the model answer does not parse', async () => {
    const router = fakeRouter(() => answer('It depends on the details'));
    const result = await classifyQuestion({
      input: 'Compare A and B',
      mode: 'auto',
      keywords,
      modelCheck: check(router),
    });
    expect(result).toEqual({
      kind: 'complex',
      method: 'keywords',
      reason:
        'model "cheap" gave no usable answer ("It depends on the details"), so the keywords decided: matched "compare"',
    });
  });

  it('falls back to the keywords when the model call fails, without throwing', async () => {
    const error = new LlmError({ kind: 'rate_limited', provider: 'p', model: 'm' });
    const router = fakeRouter(async function* () {
      yield { type: 'error', error };
    });
    const result = await classifyQuestion({
      input: 'What is 2+2?',
      mode: 'auto',
      keywords,
      modelCheck: check(router),
    });
    expect(result).toEqual({
      kind: 'simple',
      method: 'keywords',
      reason:
        'the model check failed because the model provider is rate limiting requests, so the keywords decided: no complexity keyword matched',
    });
  });

  it('a model call failing after it reported usage: the keywords decide, and the usage is counted', async () => {
    const router = fakeRouter(async function* () {
      yield {
        type: 'usage',
        usage: { inputTokens: 40, outputTokens: 2, cachedInputTokens: 0, cacheWriteTokens: 0 },
      };
      yield {
        type: 'error',
        error: new LlmError({ kind: 'stream_interrupted', provider: 'p', model: 'm' }),
      };
    });
    const result = await classifyQuestion({
      input: 'What is 2+2?',
      mode: 'auto',
      keywords,
      modelCheck: check(router, { costOf: (_, usage) => usage.inputTokens / 1000 }),
    });
    expect(result).toMatchObject({
      kind: 'simple',
      method: 'keywords',
      usage: { inputTokens: 40, outputTokens: 2, cachedInputTokens: 0, costUsd: 0.04 },
    });
  });

  it('falls back when the router throws something unexpected', async () => {
    const router = fakeRouter(() => {
      throw new Error('model "cheap" is not in the catalogue');
    });
    const result = await classifyQuestion({
      input: 'then',
      mode: 'auto',
      keywords,
      modelCheck: check(router),
    });
    expect(result.method).toBe('keywords');
    expect(result.reason).toBe(
      'the model check failed because of an unexpected error, so the keywords decided: matched "then"',
    );
  });

  it('gives up on a model that takes longer than the check timeout, and stops its call', async () => {
    let callSignal: AbortSignal | undefined;
    const router = fakeRouter(async function* (call) {
      callSignal = call.signal;
      await new Promise((resolve) => call.signal.addEventListener('abort', resolve));
      yield {
        type: 'error',
        error: new LlmError({ kind: 'cancelled', provider: 'p', model: 'm' }),
      };
    });
    const started = performance.now();
    const result = await classifyQuestion({
      input: 'What is 2+2?',
      mode: 'auto',
      keywords,
      modelCheck: check(router, { timeoutMs: 50 }),
    });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(callSignal?.aborted).toBe(true);
    expect(result.reason).toBe(
      'the model check failed because it took longer than 50 ms, so the keywords decided: no complexity keyword matched',
    );
  });

  it('reports a cancelled workflow as a cancelled check', async () => {
    const controller = new AbortController();
    controller.abort();
    const router = fakeRouter(async function* (call) {
      if (call.signal.aborted) {
        yield {
          type: 'error',
          error: new LlmError({ kind: 'cancelled', provider: 'p', model: 'm' }),
        };
      }
    });
    const result = await classifyQuestion({
      input: 'hello',
      mode: 'auto',
      keywords,
      modelCheck: check(router, { signal: controller.signal }),
    });
    expect(result.reason).toMatch(/^the model check failed because it was cancelled/);
  });
});

describe('parseComplexityAnswer', () => {
  it.each([
    ['simple', 'simple'],
    ['Complex', 'complex'],
    [' complex.\n', 'complex'],
    ['"simple"', 'simple'],
    ['Answer: complex', 'complex'],
    ['**Simple**', 'simple'],
    ['{"complexity":"complex","reason":"matched the keyword rule', 'complex'],
    ['{"complexity": "simple", "reason": "no keyword"}', 'simple'],
  ])('reads %j as %s', (text, kind) => {
    expect(parseComplexityAnswer(text)).toBe(kind);
  });

  it.each([[''], ['maybe'], ['not simple but complex'], ['simplest'], ['complexity']])(
    'finds no answer in %j',
    (text) => {
      expect(parseComplexityAnswer(text)).toBeUndefined();
    },
  );
});

describe('the classification prompt', () => {
  it('carries the marker on a line of its own, so the scripted model recognises it', () => {
    expect(CLASSIFY_SYSTEM_PROMPT.stable.split('\n')[0]).toBe(CLASSIFY_MARKER);
    expect(CLASSIFY_SYSTEM_PROMPT.volatile).toBeUndefined();
  });
});

describe('recordClassification', () => {
  it('records one classification event with kind, method and reason, and writes the kind with it', async () => {
    const recorded: unknown[] = [];
    const tracker = {
      record: async (event: unknown, alsoInTransaction?: unknown) => {
        recorded.push(event, typeof alsoInTransaction);
        return {} as never;
      },
    };
    await recordClassification(
      tracker,
      { kind: 'complex', method: 'keywords', reason: 'r' },
      { tenantId: 't', id: 'w' },
    );
    expect(recorded).toEqual([
      {
        type: 'classification',
        step: 'classify',
        status: 'completed',
        detail: { kind: 'complex', method: 'keywords', reason: 'r' },
        elapsedMs: null,
      },
      'function',
    ]);
  });
});

describe('classifierSettings', () => {
  const catalogue = {
    models: [{ name: 'big' }, { name: 'cheap' }] as never,
    defaultModel: 'big',
  };

  it('has no model check unless CLASSIFY_WITH_MODEL is on', () => {
    const settings = classifierSettings(loadConfig({ CLASSIFY_MODEL: 'cheap' }), catalogue);
    expect(settings.checkModel).toBeUndefined();
    expect(settings.keywords.keywords).toEqual(DEFAULT_COMPLEX_KEYWORDS);
  });

  // loadConfig checks CLASSIFY_MODEL against its own catalogue, so these set it afterwards.
  const on = loadConfig({ CLASSIFY_WITH_MODEL: 'true' });

  it('asks CLASSIFY_MODEL, else the system default model', () => {
    expect(classifierSettings(on, catalogue).checkModel).toBe('big');
    expect(classifierSettings({ ...on, CLASSIFY_MODEL: 'cheap' }, catalogue).checkModel).toBe(
      'cheap',
    );
  });

  it('refuses a CLASSIFY_MODEL that is not in the catalogue', () => {
    const config = { ...on, CLASSIFY_MODEL: 'nope' };
    expect(() => classifierSettings(config, catalogue)).toThrow(ConfigError);
    expect(() => classifierSettings(config, catalogue)).toThrow(/CLASSIFY_MODEL: "nope"/);
  });

  it('compiles the configured keyword list', () => {
    const settings = classifierSettings(
      loadConfig({ CLASSIFY_COMPLEX_KEYWORDS: 'versus' }),
      catalogue,
    );
    expect(settings.keywords.classify('A versus B').matched).toEqual(['versus']);
  });
});
