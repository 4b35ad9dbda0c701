/**
 * Deliberately wrong variants from chapter 32, kept only so tests can show that they drift
 * and that the checks catch it. Not exported from the package entry point; never use them.
 */
import { CounterRebuild } from "../../src/counters/counter-rebuild.ts";
import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { withTransaction } from "../../src/db/transaction.ts";
import { validateId } from "../../src/ids.ts";
import type { ApplyBatch } from "../../src/likes/like-consumer.ts";

/**
 * 32-F's setNaive: the request path adds or subtracts one without reading the old state.
 * It runs in a transaction too; the missing step is the comparison with the fact.
 */
export async function setNaive(pool: Pool, part: number, userId: string, itemId: string, want: boolean): Promise<void> {
  validateId("userId", userId);
  validateId("itemId", itemId);
  await withTransaction(pool, async (client) => {
    await client.query("INSERT INTO like_count (item_id, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [itemId, part]);
    await client.query("UPDATE like_count SET n = n + $3 WHERE item_id = $1 AND part = $2", [
      itemId,
      part,
      want ? 1 : -1,
    ]);
  });
}

/** 32-G's dedup(false): every delivery adds its delta; processed_event is only written for the watermark. */
export const applyWithoutDedup: ApplyBatch = async (client, events) => {
  await client.query(
    "INSERT INTO processed_event (part, seq, how) SELECT *, 'APPLIED' FROM unnest($1::int[], $2::bigint[]) ON CONFLICT DO NOTHING",
    [events.map((e) => e.part), events.map((e) => e.seq)],
  );
  await client.query(
    `UPDATE like_count lc SET n = lc.n + d.delta
       FROM (SELECT part, item_id, sum(delta) AS delta FROM unnest($1::int[], $2::text[], $3::int[]) AS e(part, item_id, delta)
              GROUP BY part, item_id) d
      WHERE lc.item_id = d.item_id AND lc.part = d.part`,
    [events.map((e) => e.part), events.map((e) => e.itemId), events.map((e) => e.delta)],
  );
  return { applied: events.length, covered: 0, dup: 0 };
};

/** 32-H's naive overwrite: n := count(*) at the snapshot, base_seq untouched, so nothing is COVERED. */
export async function installOverwrite(
  pool: Pool,
  itemId: string,
  counts: number[],
): Promise<{ oldN: number; newN: number }> {
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ part: number; n: number }>(
      "SELECT part, n FROM like_count WHERE item_id = $1 ORDER BY part FOR UPDATE",
      [itemId],
    );
    let oldN = 0;
    for (const row of rows) {
      oldN += row.n;
      await client.query("UPDATE like_count SET n = $3 WHERE item_id = $1 AND part = $2", [
        itemId,
        row.part,
        counts[row.part] ?? 0,
      ]);
    }
    return { oldN, newN: counts.reduce((a, b) => a + b, 0) };
  });
}

/**
 * The chunked rebuild with each chunk counted in a fresh READ COMMITTED snapshot (the pool's)
 * instead of the rebuild's REPEATABLE READ one: a fact moved by a live write between two chunks
 * is then counted by a later chunk or the install's events above S_p in the wrong proportion
 * (an unlike in a range not yet read is missing from the chunk AND subtracted again).
 */
export class ChunksOutsideSnapshotRebuild extends CounterRebuild {
  protected override readChunk(_snap: PoolClient, key: string, cursor: readonly string[], limit: number) {
    return this.pool.query<{ part: number; n: string; last: string[]; rows: string }>(this.spec.chunk!.chunkSql, [
      key,
      cursor,
      limit,
    ]);
  }
}
