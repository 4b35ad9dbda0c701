import type { CounterSpec } from "../counters/counter-spec.ts";

/**
 * comment_count per post on the shared counter machinery. countedSql reads counted_comment,
 * the view over comment_counted() (src/db/schema.sql): the one definition of a counted comment
 * that the write path's deltas, the rebuild and the audit all use.
 */
export const COMMENT_COUNTER: CounterSpec = {
  kind: "comments",
  keyName: "postId",
  hookPrefix: "comments.",
  sequence: "comment_seq",
  outbox: "comment_outbox",
  factColumn: "comment_id",
  keyColumn: "post_id",
  count: "comment_count",
  processed: "comment_processed",
  watermark: "comment_watermark",
  keysSql: "SELECT post_id AS key FROM post",
  countedSql: "SELECT post_id AS key, part, count(*) AS n FROM counted_comment GROUP BY post_id, part",
  prunedDeltasSql: "SELECT post_id AS key, delta_sum AS n FROM comment_outbox_pruned",
  rebuildRun: "comment_rebuild_run",
  rebuildRunColumns: ["keys_checked", "keys_drifted"],
  rebuildDrift: "comment_rebuild_drift",
  // "cmtrbld" in ASCII: an arbitrary constant distinct from the like rebuild's.
  rebuildLockKey: 0x636d7472626c64n.toString(),
};
