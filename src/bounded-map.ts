/**
 * Sets `key` in `map` as its newest entry (a Map keeps insertion order),
 * then drops the oldest while it holds more than `limit`: what a replica
 * remembers per tenant or per server stays bounded however many there are.
 */
export function setNewest<K, V>(map: Map<K, V>, key: K, value: V, limit: number): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > limit) {
    const oldest = map.keys().next();
    if (oldest.done) return;
    map.delete(oldest.value);
  }
}
