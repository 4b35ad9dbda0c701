import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError } from "../errors.ts";
import { advanceWatermarks, drainPartitions, lockWatermarks, type WatermarkTables } from "./watermark.ts";

/**
 * The frame every view's consumer runs in (like and comment counters, the follower projector,
 * notifications, the home timeline): a batch is one transaction between "lock the watermark rows"
 * and "advance the watermarks", and a loop fetches rounds (a batch per partition) and applies them
 * until the watermarks reach their sequences. What a batch does inside the frame is the view's
 * own, and so is whether a round is one batch (BatchConsumer.applyRound).
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

/** The partitions of a batch's events, ascending and distinct; a typed error for an empty batch. */
export function partitionsOfBatch(events: readonly { part: number }[]): number[] {
  if (events.length === 0) throw new InvalidInputError("events", "a batch needs at least one event");
  return [...new Set(events.map((e) => e.part))].sort((a, b) => a - b);
}

/**
 * One batch transaction over one or more partitions: lock their watermark rows in ascending
 * partition order (consumers of one partition take turns, consumers of different partitions run in
 * parallel), run `body`, advance each partition's contiguous watermark, then call `beforeCommit`
 * (the hook point tests park at) with the backend pid. Taking the watermark locks first is what
 * keeps the view's own row locks acyclic: no two holders of a partition's rows ever interleave.
 */
export async function inPartitionsBatch<R extends object>(
  pool: Pool,
  tables: WatermarkTables,
  parts: readonly number[],
  body: (client: PoolClient) => Promise<R>,
  beforeCommit: (pid: number | undefined) => Promise<void>,
): Promise<R & { watermarks: Map<number, number> }> {
  return withTransaction(pool, async (client) => {
    await lockWatermarks(client, tables, parts);
    const result = await body(client);
    const watermarks = await advanceWatermarks(client, tables, parts);
    await beforeCommit(backendPid(client));
    return { ...result, watermarks };
  });
}

/** inPartitionsBatch of one partition: the frame of the views whose rows several partitions share. */
export async function inPartitionBatch<R extends object>(
  pool: Pool,
  tables: WatermarkTables,
  part: number,
  body: (client: PoolClient) => Promise<R>,
  beforeCommit: (pid: number | undefined) => Promise<void>,
): Promise<R & { watermark: number }> {
  let result: R | undefined;
  const { watermarks } = await inPartitionsBatch(
    pool,
    tables,
    [part],
    async (client) => {
      result = await body(client);
      return {};
    },
    beforeCommit,
  );
  return { ...result!, watermark: watermarks.get(part)! };
}

/** What the loop needs of a view's consumer. */
export interface BatchConsumer<E extends { part: number; seq: number }, K extends string> {
  /** Up to `limit` unprocessed events above the watermark and above `after`. */
  fetchPending(part: number, limit: number, after?: number): Promise<E[]>;
  /**
   * Applies a round: one batch per partition, each read by fetchPending (no second check against
   * the outbox). The counters and the notification view apply a round in one transaction (their
   * rows are one partition's, or locked for the whole round in one order); the follower projector
   * and the home timeline apply each batch in a transaction of its own (applyEachBatch).
   */
  applyRound(batches: readonly (readonly E[])[]): Promise<Tally<K>>;
}

/** A round applied batch by batch, each in its own transaction (`apply`). */
export async function applyEachBatch<E, K extends string>(
  batches: readonly (readonly E[])[],
  empty: () => Tally<K>,
  apply: (events: readonly E[]) => Promise<Tally<NoInfer<K>>>,
): Promise<Tally<K>> {
  const total = empty();
  for (const batch of batches) addTally(total, await apply(batch));
  return total;
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
 * Rounds one pass takes at most while some partition's batch comes back full, so that a loop
 * serving several partitions still sees an idle one again soon.
 */
export const BATCHES_PER_PASS = 8;

/**
 * One pass over the given partitions; returns what it did. A round is each partition's next batch
 * (up to `batchSize` events above its watermark); while a round is applied, the pass reads the next
 * one on another connection: the partitions whose batch came back full, above its last seq, at most
 * BATCHES_PER_PASS rounds per pass. One loop's reads and applies overlap, so it goes at the pace of
 * its applies alone. A round read ahead of one whose apply failed is dropped with the pass: the next
 * pass reads from the watermarks again; so is one read ahead when `signal` aborts (the loop is
 * stopping): the round being applied commits and the pass returns, rather than after its last
 * round (a notification loop, eight rounds per view, took 1.6 s to stop).
 */
export async function pollPartitions<E extends { part: number; seq: number }, K extends string>(
  consumer: BatchConsumer<E, NoInfer<K>>,
  empty: () => Tally<K>,
  parts: readonly number[],
  batchSize: number,
  signal?: AbortSignal,
): Promise<Tally<K>> {
  const total = empty();
  if (signal?.aborted) return total;
  let round = await fetchRound(
    consumer,
    parts.map((part) => ({ part, after: 0 })),
    batchSize,
  );
  for (let rounds = 1; round.length > 0 && !signal?.aborted; rounds++) {
    const again =
      rounds < BATCHES_PER_PASS
        ? round.filter((b) => b.length === batchSize).map((b) => ({ part: b[0]!.part, after: b[b.length - 1]!.seq }))
        : [];
    const [applied, next] = await Promise.all([consumer.applyRound(round), fetchRound(consumer, again, batchSize)]);
    addTally(total, applied);
    round = next;
  }
  return total;
}

/** The non-empty batches of the given partitions, read one after another (one connection at a time). */
async function fetchRound<E extends { part: number; seq: number }, K extends string>(
  consumer: BatchConsumer<E, K>,
  wanted: readonly { part: number; after: number }[],
  batchSize: number,
): Promise<E[][]> {
  const round: E[][] = [];
  for (const { part, after } of wanted) {
    const batch = await consumer.fetchPending(part, batchSize, after);
    if (batch.length > 0) round.push(batch);
  }
  return round;
}

/** Passes until every partition's watermark has reached its sequence (drainPartitions). */
export async function drainBatches<E extends { part: number; seq: number }, K extends string>(
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
