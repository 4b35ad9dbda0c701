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
  // "likerbld" in ASCII: an arbitrary constant.
  rebuildLockKey: 0x6c696b6572626c64n.toString(),
};
