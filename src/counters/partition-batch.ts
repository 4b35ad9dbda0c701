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
export interface BatchConsumer<E, K extends string> {
  fetchPending(part: number, limit: number): Promise<E[]>;
  applyBatch(events: readonly E[]): Promise<Tally<K>>;
}

/** One pass over the given partitions: at most one batch each; returns what it did. */
export async function pollPartitions<E, K extends string>(
  consumer: BatchConsumer<E, NoInfer<K>>,
  empty: () => Tally<K>,
  parts: readonly number[],
  batchSize: number,
): Promise<Tally<K>> {
  const total = empty();
  for (const part of parts) {
    const events = await consumer.fetchPending(part, batchSize);
    if (events.length > 0) addTally(total, await consumer.applyBatch(events));
  }
  return total;
}

/** Passes until every partition's watermark has reached its sequence (drainPartitions). */
export async function drainBatches<E, K extends string>(
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
