/**
 * The two write baselines of the benchmark, run on the same cluster as the project's paths:
 * the chapter's own like transaction (statement by statement, one global like_seq row), and
 * plain single-row INSERTs of distinct rows (what pgbench with an INSERT script measures).
 */
import type { Pool } from "../src/db/pool.ts";
import { withTransaction } from "../src/db/transaction.ts";

/**
 * Chapter 32's transaction as the chapter writes it: BEGIN, placeholder INSERT, SELECT ... FOR
 * UPDATE, UPDATE fact, UPDATE like_seq (the one row of a P = 1 database), INSERT outbox, COMMIT:
 * seven round trips. Only meaningful on a P = 1 database (part 0 is every user's partition).
 * Returns whether it wrote an event.
 */
export function chapterSetLiked(pool: Pool, userId: string, itemId: string, want: boolean): Promise<boolean> {
  return withTransaction(pool, async (client) => {
    await client.query(
      "INSERT INTO like_fact (user_id, item_id, liked, version) VALUES ($1, $2, false, 0) ON CONFLICT DO NOTHING",
      [userId, itemId],
    );
    const { rows } = await client.query<{ liked: boolean; version: number }>(
      "SELECT liked, version FROM like_fact WHERE user_id = $1 AND item_id = $2 FOR UPDATE",
      [userId, itemId],
    );
    const current = rows[0]!;
    if (current.liked === want) return false;
    const version = current.version + 1;
    await client.query(
      "UPDATE like_fact SET liked = $3, version = $4, changed_at = now() WHERE user_id = $1 AND item_id = $2",
      [userId, itemId, want, version],
    );
    const seq = (
      await client.query<{ last: number }>("UPDATE like_seq SET last = last + 1 WHERE part = 0 RETURNING last")
    ).rows[0]!.last;
    await client.query(
      "INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version) VALUES (0, $1, $2, $3, $4, $5)",
      [seq, userId, itemId, want ? 1 : -1, version],
    );
    return true;
  });
}

export async function createRawInsertTable(pool: Pool): Promise<void> {
  await pool.query(
    "CREATE TABLE bench_raw_insert (id bigint PRIMARY KEY, user_id text NOT NULL, item_id text NOT NULL)",
  );
}

/** One autocommit INSERT of a distinct row: the floor a write with a durable commit cannot beat. */
export async function rawInsert(pool: Pool, id: number, userId: string, itemId: string): Promise<void> {
  await pool.query("INSERT INTO bench_raw_insert (id, user_id, item_id) VALUES ($1, $2, $3)", [id, userId, itemId]);
}
