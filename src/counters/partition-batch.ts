import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError } from "../errors.ts";
import { advanceWatermark, drainPartitions, lockWatermark, type WatermarkTables } from "./watermark.ts";

/**
 * The frame every view's consumer runs in (like and comment counters, the follower
 * projector): a batch is one transaction on one partition between "lock the watermark row"
 * and "advance the watermark", and a loop fetches and applies batches per partition until the
 * watermarks reach their sequences. What a batch does inside the frame is the view's own.
 */

/** Tallies of what happened to delivered events (applied/covered/dup, applied/stale/dup). */
export type Tally<K extends string> = Record<K, number>;

/** Adds `from` into `into`, over the keys of `into` (extra fields of `from`, like a watermark, are ignored). */
export function addTally<K extends string>(into: Tally<K>, from: Tally<K>): Tally<K> {
  for (const k of Object.keys(into) as K[]) into[k] += from[k];
  return into;
}

function sumTally(t: Record<string, number>): number {
  return Object.values(t).reduce((a, b) => a + b, 0);
}

/** The partition of a non-empty batch whose events all belong to one partition; a typed error otherwise. */
export function partitionOfBatch(events: readonly { part: number }[]): number {
  const part = events[0]?.part;
  if (part === undefined) throw new InvalidInputError("events", "a batch needs at least one event");
  if (events.some((e) => e.part !== part))
    throw new InvalidInputError("events", "a batch must hold events of one partition");
  return part;
}

/**
 * One batch transaction: lock the partition's watermark row (consumers of one partition take
 * turns, consumers of different partitions run in parallel), run `body`, advance the
 * contiguous watermark, then call `beforeCommit` (the hook point tests park at) with the
 * backend pid. Taking the watermark lock first is what keeps the view's own row locks
 * acyclic: no two holders of a partition's rows ever interleave.
 */
export async function inPartitionBatch<R extends object>(
  pool: Pool,
  tables: WatermarkTables,
  part: number,
  body: (client: PoolClient) => Promise<R>,
  beforeCommit: (pid: number | undefined) => Promise<void>,
): Promise<R & { watermark: number }> {
  return withTransaction(pool, async (client) => {
    await lockWatermark(client, tables, part);
    const result = await body(client);
    const watermark = await advanceWatermark(client, tables, part);
    await beforeCommit(backendPid(client));
    return { ...result, watermark };
  });
}

/** What the loop needs of a view's consumer. */
export interface BatchConsumer<E extends { seq: number }, K extends string> {
  /** Up to `limit` unprocessed events above the watermark and above `after`. */
  fetchPending(part: number, limit: number, after?: number): Promise<E[]>;
  /** Applies events that fetchPending read from the outbox (no second check against it). */
  applyFetched(events: readonly E[]): Promise<Tally<K>>;
}

/**
 * The most events one batch transaction applies, unless the caller says otherwise (the service's
 * consumer loops and every drain). Under load each round trip waits for a CPU, so a batch costs
 * its statements' waits whatever its size: on the loaded 2-core machine one loop drained 4.6k
 * events/s in batches of 200, 12.6k in batches of 1,000 and 16.6k in batches of 2,000
 * (docs/decisions/0024-consumers-keep-up.md). A batch holds its count rows' locks until it commits,
 * which is what a rebuild's install of one of its keys waits for; a caught-up loop's batches hold
 * what arrived since the last one, far fewer.
 */
export const CONSUMER_BATCH = 2000;

/**
 * Batches one pass takes from one partition at most while each comes back full, so that a loop
 * serving several partitions still visits each of them often.
 */
export const BATCHES_PER_PASS = 8;

/**
 * One pass over the given partitions; returns what it did. While a batch's transaction runs, the
 * pass reads the next batch on another connection: the same partition's events above the batch's
 * last seq when the batch came back full (at most BATCHES_PER_PASS batches of a partition per
 * pass, so a loop serving several partitions visits each often), else the next partition's first
 * batch. One loop's reads and applies overlap, so it goes at the pace of its applies alone. A
 * batch read ahead of one whose apply failed is dropped with the pass: the next pass reads from the
 * watermark again.
 */
export async function pollPartitions<E extends { seq: number }, K extends string>(
  consumer: BatchConsumer<E, NoInfer<K>>,
  empty: () => Tally<K>,
  parts: readonly number[],
  batchSize: number,
): Promise<Tally<K>> {
  const total = empty();
  let index = 0;
  let batch = 1;
  let events = parts.length > 0 ? await consumer.fetchPending(parts[0]!, batchSize) : [];
  while (index < parts.length) {
    const part = parts[index]!;
    let next: Promise<E[]>;
    if (events.length === batchSize && batch < BATCHES_PER_PASS) {
      batch++;
      next = consumer.fetchPending(part, batchSize, events[events.length - 1]!.seq);
    } else {
      index++;
      batch = 1;
      next = index < parts.length ? consumer.fetchPending(parts[index]!, batchSize) : Promise.resolve([]);
    }
    if (events.length > 0) {
      const [applied, fetched] = await Promise.all([consumer.applyFetched(events), next]);
      addTally(total, applied);
      events = fetched;
    } else {
      events = await next;
    }
  }
  return total;
}

/** Passes until every partition's watermark has reached its sequence (drainPartitions). */
export async function drainBatches<E extends { seq: number }, K extends string>(
  pool: Pool,
  tables: WatermarkTables,
  name: string,
  consumer: BatchConsumer<E, NoInfer<K>>,
  empty: () => Tally<K>,
  batchSize: number,
): Promise<Tally<K>> {
  const total = empty();
  await drainPartitions(pool, tables, name, async (parts) => {
    const pass = await pollPartitions(consumer, empty, parts, batchSize);
    addTally(total, pass);
    return sumTally(pass);
  });
  return total;
}
