/**
 * The scale bench's storage figure: the like tables with their indexes and TOAST
 * (pg_total_relation_size) per like, next to a bare table (user_id text, item_id text, PRIMARY KEY
 * (user_id, item_id)) holding the same pairs, built in key order and vacuumed.
 */
import type { Pool } from "../src/db/pool.ts";

export const LIKE_TABLES = ["like_fact", "like_outbox", "like_outbox_pruned", "like_count", "processed_event"] as const;

export interface SizeFigures {
  likes: number;
  tables: { table: string; bytes: number }[];
  bytesPerLike: number;
  bareBytesPerLike: number;
}

export async function sizeFigures(pool: Pool): Promise<SizeFigures> {
  const likes = Number((await pool.query<{ n: string }>("SELECT count(*) AS n FROM like_fact WHERE liked")).rows[0]!.n);
  await pool.query(`VACUUM ${LIKE_TABLES.join(", ")}`);
  const { rows } = await pool.query<{ table: string; bytes: string }>(
    "SELECT t AS table, pg_total_relation_size(t::regclass) AS bytes FROM unnest($1::text[]) t",
    [LIKE_TABLES],
  );
  const tables = rows.map((r) => ({ table: r.table, bytes: Number(r.bytes) }));
  await pool.query("DROP TABLE IF EXISTS bench_bare_like");
  await pool.query("CREATE TABLE bench_bare_like (user_id text, item_id text, PRIMARY KEY (user_id, item_id))");
  try {
    await pool.query("INSERT INTO bench_bare_like SELECT user_id, item_id FROM like_fact WHERE liked ORDER BY 1, 2");
    await pool.query("VACUUM bench_bare_like");
    const bare = Number(
      (await pool.query<{ bytes: string }>("SELECT pg_total_relation_size('bench_bare_like') AS bytes")).rows[0]!.bytes,
    );
    return {
      likes,
      tables,
      bytesPerLike: tables.reduce((a, t) => a + t.bytes, 0) / likes,
      bareBytesPerLike: bare / likes,
    };
  } finally {
    await pool.query("DROP TABLE bench_bare_like");
  }
}
