import type { CounterSpec } from "../counters/counter-spec.ts";

/**
 * like_count per item on the shared counter machinery (src/counters/), with the seeds' table
 * names. countedSql is the one definition of a counted like: a like_fact row with liked set,
 * in its user's partition; the write path's deltas (+1 like, -1 unlike, NOOP otherwise) move
 * exactly that set.
 */
export const LIKE_COUNTER: CounterSpec = {
  kind: "likes",
  keyName: "itemId",
  // The like hooks (consumer.beforeCommit, rebuild.afterSnapshot, ...) predate the shared code.
  hookPrefix: "",
  sequence: "like_seq",
  outbox: "like_outbox",
  factColumn: "user_id",
  keyColumn: "item_id",
  count: "like_count",
  processed: "processed_event",
  watermark: "counter_watermark",
  keysSql: "SELECT item_id AS key FROM item",
  countedSql: `SELECT f.item_id AS key, ledger_partition(f.user_id, cfg.partitions) AS part, count(*) AS n
                 FROM like_fact f CROSS JOIN ledger_config cfg WHERE f.liked GROUP BY 1, 2`,
  rebuildRun: "like_rebuild_run",
  rebuildRunColumns: ["items_checked", "items_drifted"],
  rebuildDrift: "like_rebuild_drift",
  prunedDeltasSql: "SELECT item_id AS key, sum(delta_sum) AS n FROM like_outbox_pruned GROUP BY 1",
  // Along like_fact_likers (item_id, changed_at DESC, user_id) WHERE liked: the cursor is the last
  // (changed_at, user_id) counted. A chunk is two index ranges, the rest of the cursor's tie
  // (changed_at = c AND user_id > u) and then what is older (changed_at < c): one condition
  // "changed_at <= c AND (changed_at < c OR user_id > u)" would filter, not bound, the tie, and an
  // item whose likes share one changed_at (a bulk load) would be rescanned from its top per chunk.
  // changed_at goes through text and back in the same session: exact to the microsecond.
  chunk: {
    start: ["infinity", ""],
    cappedSql: `
      SELECT k.key, ledger_partition(x.user_id, cfg.partitions) AS part, count(*) AS n
        FROM unnest($1::text[]) AS k(key) CROSS JOIN ledger_config cfg
        CROSS JOIN LATERAL (SELECT f.user_id FROM like_fact f WHERE f.item_id = k.key AND f.liked
                             ORDER BY f.changed_at DESC, f.user_id LIMIT $2) x
       GROUP BY 1, 2`,
    chunkSql: `
      WITH c AS MATERIALIZED (
        SELECT * FROM (
          (SELECT 1 AS branch, f.user_id, f.changed_at FROM like_fact f
            WHERE f.item_id = $1 AND f.liked AND f.changed_at = ($2::text[])[1]::timestamptz AND f.user_id > ($2::text[])[2]
            ORDER BY f.user_id LIMIT $3)
          UNION ALL
          (SELECT 2, f.user_id, f.changed_at FROM like_fact f
            WHERE f.item_id = $1 AND f.liked AND f.changed_at < ($2::text[])[1]::timestamptz
            ORDER BY f.changed_at DESC, f.user_id LIMIT $3)) b
         ORDER BY branch, changed_at DESC, user_id
         LIMIT $3)
      SELECT p.part, p.n,
             (SELECT ARRAY[c.changed_at::text, c.user_id] FROM c ORDER BY c.branch DESC, c.changed_at, c.user_id DESC LIMIT 1) AS last,
             (SELECT count(*) FROM c) AS rows
        FROM (SELECT ledger_partition(c.user_id, cfg.partitions) AS part, count(*) AS n
                FROM c CROSS JOIN ledger_config cfg GROUP BY 1) p`,
  },
  // "likerbld" in ASCII: an arbitrary constant.
  rebuildLockKey: 0x6c696b6572626c64n.toString(),
};
