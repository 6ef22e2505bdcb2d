// Importing this makes the service's sources that later imports name load
// from tsc's output instead (service-from-dist.mjs): bench/run.ts imports
// it after building, and a benchmark's own processes take it with
// `--import` after tsx's (sse-fanout's server).
import { register } from 'node:module';

const root = new URL('../../', import.meta.url);
register('./service-from-dist.mjs', import.meta.url, {
  data: { src: new URL('src/', root).href, dist: new URL('dist/', root).href },
});
