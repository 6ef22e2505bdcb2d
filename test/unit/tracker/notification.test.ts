import { describe, expect, it } from 'vitest';
import { notificationPayload, parseNotification } from '../../../src/tracker/notification.js';

describe('parseNotification', () => {
  const events = {
    kind: 'events' as const,
    workflowId: 'w1',
    lastSeq: 7,
    origin: 'replica-a',
    tokens: { text: 'Hel', afterSeq: 6 },
  };

  it('reads what notificationPayload writes, and what PostgreSQL’s json_build_object writes', () => {
    expect(parseNotification(notificationPayload(events))).toEqual(events);
    const fromSql = '{"k" : "e", "w" : "w1", "s" : 7, "o" : "replica-a", "t" : "Hel", "a" : 6}';
    expect(parseNotification(fromSql)).toEqual(events);
  });

  it('answers null for the replica’s own notifications, without reading the rest, and reads the others’', () => {
    expect(parseNotification(notificationPayload(events), 'replica-a')).toBeNull();
    expect(parseNotification('{"o":"replica-a","k":"unknown"}', 'replica-a')).toBeNull();
    expect(parseNotification(notificationPayload(events), 'replica-b')).toEqual(events);
  });

  it('reads a key change, and a key just issued with its hash, which a payload of an older replica lacks', () => {
    const change = {
      kind: 'principals' as const,
      tenantId: 't1',
      keyId: 'k1',
      origin: 'replica-a',
    };
    expect(parseNotification(notificationPayload(change))).toEqual(change);
    const issued = { ...change, issuedKeyHash: 'ab'.repeat(32) };
    expect(notificationPayload(issued)).toBe(
      `{"k":"a","t":"t1","i":"k1","o":"replica-a","n":"${'ab'.repeat(32)}"}`,
    );
    expect(parseNotification(notificationPayload(issued))).toEqual(issued);
    // Not a SHA-256 in hex: the payload is malformed.
    expect(
      parseNotification(notificationPayload({ ...change, issuedKeyHash: 'secret' })),
    ).toBeUndefined();
  });

  it('answers undefined for a malformed payload, whoever asks', () => {
    for (const payload of ['not json', '{"k":"e","w":"w1"}', 'null', '{"o":"replica-b","k":"x"}']) {
      expect(parseNotification(payload, 'replica-a')).toBeUndefined();
    }
  });
});
