import type { Pool, PoolClient } from "../db/pool.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { withTransaction } from "../db/transaction.ts";

/**
 * Every derived view (like counts, follower projection, comment counts) keeps, per partition, a
 * gapless sequence, a set of processed sequence numbers and a contiguous watermark. The view
 * names its three tables here; the names are constants of our code, never input.
 */
export interface WatermarkTables {
  /** Per partition the gapless sequence: (part, last). */
  sequence: string;
  /** The processed sequence numbers: (part, seq, ...). */
  seen: string;
  /** The contiguous watermark: (part, applied_upto). */
  watermark: string;
}

/**
 * Moves each given partition's watermark to the end of the contiguous run of processed sequence
 * numbers: rows with seq = w + row_number are exactly the gap-free prefix above w. Call it with the
 * watermark rows already locked by an earlier statement, so this statement's snapshot holds every
 * row committed by whoever held a lock before. Returns the watermarks by partition.
 */
export async function advanceWatermarks(
  client: PoolClient,
  t: WatermarkTables,
  parts: readonly number[],
): Promise<Map<number, number>> {
  const { rows } = await client.query<{ part: number; applied_upto: number }>({
    name: `${t.watermark}_advance`,
    text: `UPDATE ${t.watermark} w
        SET applied_upto = coalesce((
              SELECT max(s.seq)
                FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS rn
                        FROM ${t.seen} WHERE part = w.part AND seq > w.applied_upto) s
               WHERE s.seq = w.applied_upto + s.rn), w.applied_upto)
      WHERE part = ANY ($1::int[])
      RETURNING part, applied_upto`,
    values: [parts],
  });
  return new Map(rows.map((r) => [r.part, r.applied_upto]));
}

/** advanceWatermarks of one partition. */
export async function advanceWatermark(client: PoolClient, t: WatermarkTables, part: number): Promise<number> {
  return (await advanceWatermarks(client, t, [part])).get(part)!;
}

/**
 * Up to $2 events of partition $1 above its watermark and above $3 (the last seq of a batch
 * still being applied, 0 for none) and not yet seen, in seq order, read from `outbox` as `o` with
 * `columns`. The watermark is a scalar subquery, so it bounds the outbox's
 * primary-key range (`part = $1 AND seq > w`) and the read costs the batch, not the partition's
 * whole retained history: joined as a table, its bound was a join filter applied after an index
 * scan from the partition's first event, and the seen check a merge anti join over every seen key
 * (test/counters/fetch-pending-plan.test.ts). The seen check carries the same bound, so whichever
 * anti join the planner picks reads only the seen keys above it (usually none: only a transport's
 * out-of-order batch leaves any).
 */
export function fetchPendingSql(outbox: string, columns: string, t: WatermarkTables): string {
  const above = `greatest((SELECT applied_upto FROM ${t.watermark} WHERE part = $1), $3::bigint)`;
  return `SELECT ${columns} FROM ${outbox} o
           WHERE o.part = $1 AND o.seq > ${above}
             AND NOT EXISTS (SELECT 1 FROM ${t.seen} p WHERE p.part = $1 AND p.seq = o.seq AND p.seq > ${above})
           ORDER BY o.seq LIMIT $2`;
}

/**
 * Locks the given partitions' watermark rows in ascending partition order, whatever order they are
 * given in: the sort runs below the row locking, so the rows are locked as they come out of it. Every
 * holder of several partitions' rows (a consumer's round, the import's like phase) takes them in this
 * one total order, so none of them can wait for a lower partition while holding a higher one: no
 * lock cycle can form (docs/write-path.md, "The consumers' round").
 */
export async function lockWatermarks(client: PoolClient, t: WatermarkTables, parts: readonly number[]): Promise<void> {
  await client.query({
    name: `${t.watermark}_lock`,
    text: `SELECT part FROM ${t.watermark} WHERE part = ANY ($1::int[]) ORDER BY part FOR UPDATE`,
    values: [parts],
  });
}

export async function lockWatermark(client: PoolClient, t: WatermarkTables, part: number): Promise<void> {
  await lockWatermarks(client, t, [part]);
}

/**
 * Runs `pollOnce` over all partitions until every watermark has reached its sequence. When
 * nothing is left to process but a watermark still lags (its last batch was processed by a
 * worker that committed before the missing rows became visible to it), it advances it here.
 * `name` only names the view in the stall error.
 */
export async function drainPartitions(
  pool: Pool,
  t: WatermarkTables,
  name: string,
  pollOnce: (parts: number[]) => Promise<number>,
): Promise<void> {
  const parts = Array.from({ length: await readPartitions(pool) }, (_, p) => p);
  for (let idlePasses = 0; ;) {
    if ((await pollOnce(parts)) > 0) {
      idlePasses = 0;
      continue;
    }
    const { rows } = await pool.query<{ part: number }>(
      `SELECT part FROM ${t.sequence} s JOIN ${t.watermark} w USING (part) WHERE w.applied_upto < s.last`,
    );
    if (rows.length === 0) return;
    for (const { part } of rows) {
      await withTransaction(pool, async (client) => {
        await lockWatermark(client, t, part);
        await advanceWatermark(client, t, part);
      });
    }
    if (++idlePasses > 3)
      throw new Error(`${name} drain stalled: partitions ${rows.map((r) => r.part).join(",")} cannot advance`);
  }
}
