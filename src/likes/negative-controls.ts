/**
 * Deliberately wrong variants from chapter 32, kept only so tests can show that they drift
 * and that the checks catch it. Not exported from the package entry point; never use them.
 */
import type { Pool } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { validateId } from "../ids.ts";
import type { ApplyStep } from "./like-consumer.ts";

/**
 * 32-F's setNaive: the request path adds or subtracts one without reading the old state.
 * It runs in a transaction too; the missing step is the comparison with the fact.
 */
export async function setNaive(pool: Pool, part: number, userId: string, itemId: string, want: boolean): Promise<void> {
  validateId("userId", userId);
  validateId("itemId", itemId);
  await withTransaction(pool, async (client) => {
    await client.query("INSERT INTO like_count (item_id, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [itemId, part]);
    await client.query("UPDATE like_count SET n = n + $3 WHERE item_id = $1 AND part = $2", [itemId, part, want ? 1 : -1]);
  });
}

/** 32-G's dedup(false): every delivery adds its delta; processed_event is only written for the watermark. */
export const applyWithoutDedup: ApplyStep = async (client, event) => {
  await client.query(
    "INSERT INTO processed_event (part, seq, how) VALUES ($1, $2, 'APPLIED') ON CONFLICT DO NOTHING",
    [event.part, event.seq],
  );
  await client.query("UPDATE like_count SET n = n + $3 WHERE item_id = $1 AND part = $2", [event.itemId, event.part, event.delta]);
  return "applied";
};

/** 32-H's naive overwrite: n := count(*) at the snapshot, base_seq untouched, so nothing is COVERED. */
export async function installOverwrite(pool: Pool, itemId: string, counts: number[]): Promise<{ oldN: number; newN: number }> {
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ part: number; n: number }>(
      "SELECT part, n FROM like_count WHERE item_id = $1 ORDER BY part FOR UPDATE",
      [itemId],
    );
    let oldN = 0;
    for (const row of rows) {
      oldN += row.n;
      await client.query("UPDATE like_count SET n = $3 WHERE item_id = $1 AND part = $2", [itemId, row.part, counts[row.part] ?? 0]);
    }
    return { oldN, newN: counts.reduce((a, b) => a + b, 0) };
  });
}
