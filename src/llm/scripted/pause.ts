import { LlmError } from '../errors.js';

/** The error a cancelled scripted turn throws: the signal's own reason when it is an LlmError. */
export function cancelledError(signal: AbortSignal, model: string): LlmError {
  if (signal.reason instanceof LlmError) return signal.reason;
  return new LlmError({ kind: 'cancelled', provider: 'scripted', model, cause: signal.reason });
}

export function throwIfAborted(signal: AbortSignal, model: string): void {
  if (signal.aborted) throw cancelledError(signal, model);
}

/** Waits `ms`, rejecting with `cancelledError` as soon as the signal aborts. */
export function pause(options: { ms: number; signal: AbortSignal; model: string }): Promise<void> {
  const { ms, signal, model } = options;
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(cancelledError(signal, model));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(cancelledError(signal, model));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
