// A worker thread's entry for a TypeScript module: tsx's loader is
// registered in the main thread only, so each worker registers it itself,
// then imports the module named in `workerData.entry`.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.entry);
