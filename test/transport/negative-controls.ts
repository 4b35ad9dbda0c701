/**
 * Deliberately wrong ways to consume from the broker, kept only so tests can show what the real
 * consumer guards against. Never use them.
 */
import type { DeliveryStrategy } from "../../src/transport/jetstream-consumer.ts";

/** Acks every message on receipt, then applies: a crash (or a failed apply) in between loses the events for the broker for good. */
export const ackBeforeApply: DeliveryStrategy = async (c, msgs) => {
  for (const m of msgs) m.ack();
  return c.apply(msgs.map((m) => c.decode(m)));
};

/**
 * Trusts the broker: adds each delivered like's delta to like_count, no outbox check, no dedup key,
 * no watermark. Correct only if the broker delivered exactly once, which it does not promise.
 */
export const trustBrokerWithoutDedup: DeliveryStrategy = async (c, msgs) => {
  const events = msgs.map((m) => c.decode(m) as unknown as { part: number; itemId: string; delta: number });
  await c.pool.query(
    `INSERT INTO like_count (item_id, part, n)
     SELECT item_id, $1, sum(delta) FROM unnest($2::text[], $3::int[]) AS e(item_id, delta) GROUP BY item_id
     ON CONFLICT (item_id, part) DO UPDATE SET n = like_count.n + EXCLUDED.n`,
    [c.part, events.map((e) => e.itemId), events.map((e) => e.delta)],
  );
  for (const m of msgs) m.ack();
  return { applied: events.length };
};
