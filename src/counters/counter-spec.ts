import type { WatermarkTables } from "./watermark.ts";

/**
 * What a counted fact tells the shared counter machinery (src/counters/): its table names and
 * the SQL that counts its facts. Every name is a constant of our code, never input. A fact
 * module (likes, comments) supplies one spec; the consumer, the read with its error bound, the
 * rebuild and the audit are written once against it.
 */
export interface CounterSpec {
  /** The counter's name in errors, metrics, statement names and drain messages ("likes", "comments"). */
  kind: string;
  /** What the key is called in errors and reports ("itemId", "postId"). */
  keyName: string;
  /**
   * Prefix of the hook points (`${hookPrefix}consumer.beforeCommit`, `${hookPrefix}rebuild.afterSnapshot`, ...).
   * Likes use "" because their hook names predate the shared code and tests name them.
   */
  hookPrefix: string;
  /** Per partition: the gapless sequence (part, last). */
  sequence: string;
  /** (part, seq, <factColumn>, <keyColumn>, delta, version): one event per change of counted state. */
  outbox: string;
  /** Column of the outbox naming the fact besides the key (comment_id; user_id for a like). */
  factColumn: string;
  /** Column naming what is counted, in the outbox and the count table (post_id, item_id). */
  keyColumn: string;
  /** (<keyColumn>, part, n, base_seq): the derived count, one row per (key, partition). */
  count: string;
  /** (part, seq, how): how each event took effect, APPLIED or COVERED by a rebuild baseline. */
  processed: string;
  /** (part, applied_upto): the contiguous watermark. */
  watermark: string;
  /** Every key that can be counted, as rows of `key`, for the rebuild. */
  keysSql: string;
  /**
   * The counted facts per key and partition as rows (key, part, n): THE definition of what is
   * counted, shared by the rebuild and the audit (the write path derives its deltas from the
   * same SQL predicate).
   */
  countedSql: string;
  /** (snapshot_seqs, <checked>, <drifted>, total_abs_drift) and (run_id, <keyColumn>, old_n, new_n, drift). */
  rebuildRun: string;
  /** The run table's two count columns: keys checked, keys drifted. */
  rebuildRunColumns: readonly [checked: string, drifted: string];
  rebuildDrift: string;
  /**
   * The outbox events pruned by retention, summed per key as rows (key, n): the write-side
   * audit adds them to the kept events' deltas (docs/retention.md). Omitted: never pruned.
   */
  prunedDeltasSql?: string;
  /**
   * Counting one key's facts in chunks, for a key with more facts than one statement should read
   * (a hot item's million likes): the rebuild reads such a key chunk by chunk along an index, in
   * its snapshot. The same predicate as countedSql. Omitted: every key is counted in one statement.
   */
  chunk?: CounterChunkSpec;
  /** pg advisory lock key of this counter's rebuild. */
  rebuildLockKey: string;
}

/** The watermark tables of a counter (src/counters/watermark.ts). */
export function watermarkTablesOf(s: CounterSpec): WatermarkTables {
  return { sequence: s.sequence, seen: s.processed, watermark: s.watermark };
}

/** One outbox row as delivered to a consumer. */
export interface CountEvent {
  part: number;
  seq: number;
  factId: string;
  key: string;
  delta: 1 | -1;
  version: number;
}

export interface CountReading {
  n: number;
  lag: number;
  /** Unprocessed events of this key above the watermarks: |n - truth| <= pending. */
  pending: number;
  stale: boolean;
}

/**
 * How the rebuild counts one key's facts in chunks: a keyset cursor along an index of the key's
 * counted facts, as text[] (the statements cast it), so that each chunk is one index range.
 */
export interface CounterChunkSpec {
  /** The cursor before the first counted fact of any key. */
  start: readonly string[];
  /**
   * For keys $1 (text[]), the first $2 counted facts of each key in cursor order, counted per
   * partition: rows (key, part, n). A key whose n sum to $2 may have more (counted in chunks).
   */
  cappedSql: string;
  /**
   * The counted facts of key $1 after cursor $2 in cursor order, at most $3 of them, counted per
   * partition: rows (part, n, last, rows), every row carrying the chunk's last cursor and its size.
   * No rows: nothing after the cursor.
   */
  chunkSql: string;
}
