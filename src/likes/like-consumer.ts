import type { Pool, PoolClient } from "../db/pool.ts";
import {
  addCounterStats,
  applyWithDedup as counterApplyWithDedup,
  CounterConsumer,
  emptyCounterStats,
  type CounterStats,
} from "../counters/counter-consumer.ts";
import type { CountEvent } from "../counters/counter-spec.ts";
import { CONSUMER_BATCH } from "../counters/partition-batch.ts";
import type { Hooks } from "../hooks.ts";
import { LIKE_COUNTER } from "./like-spec.ts";
import type { LikeEvent } from "./types.ts";

export type ConsumeStats = CounterStats;
export const emptyStats = emptyCounterStats;
export const addStats = addCounterStats;

export function toLikeEvent(e: CountEvent): LikeEvent {
  return { part: e.part, seq: e.seq, userId: e.factId, itemId: e.key, delta: e.delta, version: e.version };
}

export function toCountEvent(e: LikeEvent): CountEvent {
  return { part: e.part, seq: e.seq, factId: e.userId, key: e.itemId, delta: e.delta, version: e.version };
}

/**
 * How a batch of one or more partitions' events takes effect (figure 32-2), with their watermark
 * rows and every count row of the batch already locked: src/counters' CounterApply in the like's
 * terms, so that the negative controls (test/likes/negative-controls.ts) can be written against it.
 */
export type ApplyBatch = (client: PoolClient, events: readonly LikeEvent[]) => Promise<ConsumeStats>;

const dedup = counterApplyWithDedup(LIKE_COUNTER);

/** The shared de-duplicating apply (src/counters/counter-consumer.ts) on like_count. */
export const applyWithDedup: ApplyBatch = (client, events) => dedup(client, events.map(toCountEvent));

/**
 * Applies delivered like_outbox events to like_count, exactly once per event whatever the
 * delivery does: the shared CounterConsumer on LIKE_COUNTER, in LikeEvent terms. A batch is one
 * transaction over one or more partitions that locks their watermark rows in partition order,
 * then the batch's (item, partition) count rows in (partition, item) order, applies the batch in
 * one statement and advances each contiguous watermark; the hook point is `consumer.beforeCommit`.
 */
export class LikeConsumer {
  private readonly counter: CounterConsumer;

  constructor(
    private readonly pool: Pool,
    options: { hooks?: Hooks; applyBatch?: ApplyBatch } = {},
  ) {
    const { hooks, applyBatch } = options;
    this.counter = new CounterConsumer(pool, LIKE_COUNTER, {
      ...(hooks ? { hooks } : {}),
      ...(applyBatch ? { apply: (client, events) => applyBatch(client, events.map(toLikeEvent)) } : {}),
    });
  }

  /** Applies a batch of events that all belong to one partition (`expired`: pruned redeliveries, docs/retention.md). */
  async applyBatch(events: readonly LikeEvent[]): Promise<ConsumeStats & { watermark: number; expired: number }> {
    return this.counter.applyBatch(events.map(toCountEvent));
  }

  /** Applies fetched batches, one per partition, in one transaction (CounterConsumer.applyRound). */
  async applyRound(
    batches: readonly (readonly LikeEvent[])[],
  ): Promise<ConsumeStats & { watermarks: Map<number, number>; expired: number }> {
    return this.counter.applyRound(batches.map((b) => b.map(toCountEvent)));
  }

  /** Up to `limit` unprocessed events of a partition above its watermark (read without locks). */
  async fetchPending(part: number, limit: number, after = 0): Promise<LikeEvent[]> {
    return (await this.counter.fetchPending(part, limit, after)).map(toLikeEvent);
  }

  /** Events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<LikeEvent[]> {
    return (await this.counter.fetchRange(part, fromSeq, toSeq)).map(toLikeEvent);
  }

  /** One pass over the given partitions; returns what it did. */
  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<ConsumeStats> {
    return this.counter.pollOnce(parts, batchSize, signal);
  }

  /** Consumes until every partition's watermark has reached its sequence. */
  async drain(batchSize = CONSUMER_BATCH): Promise<ConsumeStats> {
    return this.counter.drain(batchSize);
  }
}
