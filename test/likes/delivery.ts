import type { LikeConsumer } from "../../src/likes/like-consumer.ts";
import { addStats, emptyStats, type ConsumeStats } from "../../src/likes/like-consumer.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import type { Pool } from "../../src/db/pool.ts";

/** Test-side transports: how the chapter's test threads deliver outbox rows to consumers. */

export async function allEvents(consumer: LikeConsumer, partitions: number): Promise<LikeEvent[]> {
  const events: LikeEvent[] = [];
  for (let part = 0; part < partitions; part++)
    events.push(...(await consumer.fetchRange(part, 1, Number.MAX_SAFE_INTEGER)));
  return events;
}

/** Delivers events in the given order, `batchSize` at a time, each batch split by partition. */
export async function deliver(
  consumer: LikeConsumer,
  events: readonly LikeEvent[],
  batchSize: number,
): Promise<ConsumeStats> {
  const total = emptyStats();
  for (let i = 0; i < events.length; i += batchSize) {
    const slice = events.slice(i, i + batchSize);
    for (const part of new Set(slice.map((e) => e.part))) {
      addStats(total, await consumer.applyBatch(slice.filter((e) => e.part === part)));
    }
  }
  return total;
}

/**
 * The chapter's competing consumer: pull the next `batchSize` events above the current
 * watermark (processed or not) before taking any lock, so concurrent pullers overlap.
 */
export async function pullFromWatermark(
  pool: Pool,
  consumer: LikeConsumer,
  part: number,
  batchSize: number,
): Promise<ConsumeStats | undefined> {
  const { rows } = await pool.query<{ applied_upto: number; last: number }>(
    "SELECT w.applied_upto, s.last FROM counter_watermark w JOIN like_seq s USING (part) WHERE part = $1",
    [part],
  );
  const { applied_upto: from, last } = rows[0]!;
  if (from >= last) return undefined;
  const events = await consumer.fetchRange(part, from + 1, Math.min(last, from + batchSize));
  return consumer.applyBatch(events);
}

/** Runs `consumers` competing pullers over every partition until all watermarks reach their sequence. */
export async function competingConsumers(
  pool: Pool,
  consumer: LikeConsumer,
  consumers: number,
  partitions: number,
  batchSize: number,
): Promise<ConsumeStats> {
  const total = emptyStats();
  await Promise.all(
    Array.from({ length: consumers }, async (_, c) => {
      for (;;) {
        let progressed = false;
        for (let k = 0; k < partitions; k++) {
          const stats = await pullFromWatermark(pool, consumer, (k + c) % partitions, batchSize);
          if (stats) {
            addStats(total, stats);
            progressed = true;
          }
        }
        if (!progressed) return;
      }
    }),
  );
  return total;
}
