// Module resolve hook for the benchmarks (use-built-service.mjs registers it): an
// import that resolves to one of the service's sources (src/x.ts, which is
// what tsx makes of an import of src/x.js) loads tsc's output for it
// (dist/x.js) instead, so the benchmarks measure the service as
// `npm start` runs it. Plain JavaScript: it runs on the loaders' thread.

/** @type {{ src: string, dist: string } | undefined} */
let roots;

export function initialize(data) {
  roots = data;
}

export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  if (!roots || !resolved.url.startsWith(roots.src) || !resolved.url.endsWith('.ts')) {
    return resolved;
  }
  const built = `${roots.dist}${resolved.url.slice(roots.src.length, -'.ts'.length)}.js`;
  return { url: built, format: 'module', shortCircuit: true };
}
