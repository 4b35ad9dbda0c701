import type { Pool } from "../db/pool.ts";
import { counterReadSideClean, counterReadSideSql, readCounterSide } from "../counters/counter-audit.ts";
import { readCounter, readCountSql } from "../counters/counter-reads.ts";
import { LIKE_COUNTER } from "./like-spec.ts";
import type { LikeCountReading } from "./types.ts";

/**
 * The read side and the invariant checks of chapter 32. Each function is one SQL statement,
 * so every figure it returns comes from one snapshot; an operator can paste the SQL into psql.
 */

/**
 * The count with its lag and error bound: the shared read (src/counters/counter-reads.ts) on
 * LIKE_COUNTER. lag = sum over partitions of (like_seq.last - applied_upto), and
 * pendingForItem = the item's events above each partition's watermark that are not yet
 * processed, read through like_outbox_item_seq (item_id, part, seq > applied_upto).
 */
export const READ_COUNT_SQL = readCountSql(LIKE_COUNTER);

export async function readCount(pool: Pool, itemId: string, allowedLag: number): Promise<LikeCountReading> {
  const r = await readCounter(pool, LIKE_COUNTER, itemId, allowedLag);
  return { n: r.n, lag: r.lag, pendingForItem: r.pending, stale: r.stale };
}

/**
 * Write side: the facts and the outbox move together. Per partition the sequence is
 * gapless (last = row count = max seq); every pair's version equals its number of events
 * and its liked flag equals its delta sum; every event sits in its user's partition.
 * Events pruned by retention count through their baseline (retention_floor per partition,
 * like_outbox_pruned per pair; docs/retention.md), so a prune changes none of the figures:
 * outbox_rows is the number of events ever written, pruned ones included.
 */
export const WRITE_SIDE_SQL = `
  WITH cfg AS (SELECT partitions FROM ledger_config),
  floor_ AS (SELECT part, pruned_events, pruned_max_seq, misplaced_events FROM retention_floor WHERE kind = 'likes'),
  per_part AS (
    SELECT s.part, s.last, count(o.seq) + coalesce(min(f.pruned_events), 0) AS rows,
           greatest(coalesce(max(o.seq), 0), min(f.pruned_max_seq)) AS max_seq
      FROM like_seq s LEFT JOIN like_outbox o ON o.part = s.part LEFT JOIN floor_ f ON f.part = s.part
     GROUP BY s.part, s.last),
  kept_pairs AS (
    SELECT user_id, item_id, count(*) AS events, sum(delta) AS delta_sum, min(version) AS min_version
      FROM like_outbox GROUP BY user_id, item_id),
  pair_events AS (
    SELECT user_id, item_id, coalesce(k.events, 0) + coalesce(p.events, 0) AS events,
           coalesce(k.delta_sum, 0) + coalesce(p.delta_sum, 0) AS delta_sum,
           k.min_version <= p.max_version AS overlaps_pruned
      FROM kept_pairs k FULL JOIN like_outbox_pruned p USING (user_id, item_id)),
  item_facts AS (
    SELECT item_id, count(*) FILTER (WHERE liked) AS liked FROM like_fact GROUP BY item_id),
  item_deltas AS (
    SELECT item_id, sum(delta_sum) AS delta_sum FROM pair_events GROUP BY item_id)
  SELECT (SELECT coalesce(sum(last), 0) FROM per_part)::bigint AS last_seq,
         ((SELECT count(*) FROM like_outbox) + (SELECT coalesce(sum(pruned_events), 0) FROM floor_))::bigint AS outbox_rows,
         (SELECT count(*) FROM per_part WHERE rows <> last OR max_seq <> last)::bigint AS seq_gap_partitions,
         (SELECT count(*) FROM like_fact f LEFT JOIN pair_events e USING (user_id, item_id)
           WHERE f.version <> coalesce(e.events, 0)
              OR f.liked::int <> coalesce(e.delta_sum, 0) OR e.overlaps_pruned)::bigint AS version_mismatch_pairs,
         (SELECT count(*) FROM item_facts f FULL JOIN item_deltas d USING (item_id)
           WHERE coalesce(f.liked, 0) <> coalesce(d.delta_sum, 0))::bigint AS delta_sum_mismatch_items,
         ((SELECT count(*) FROM like_outbox o, cfg
            WHERE o.part <> ledger_partition(o.user_id, cfg.partitions))
          + (SELECT coalesce(sum(misplaced_events), 0) FROM floor_))::bigint AS misplaced_events`;

export interface WriteSideAudit {
  lastSeq: number;
  outboxRows: number;
  seqGapPartitions: number;
  versionMismatchPairs: number;
  deltaSumMismatchItems: number;
  misplacedEvents: number;
}

export async function writeSide(pool: Pool): Promise<WriteSideAudit> {
  const { rows } = await pool.query(WRITE_SIDE_SQL);
  const r = rows[0] as Record<string, number>;
  return {
    lastSeq: r.last_seq!,
    outboxRows: r.outbox_rows!,
    seqGapPartitions: r.seq_gap_partitions!,
    versionMismatchPairs: r.version_mismatch_pairs!,
    deltaSumMismatchItems: r.delta_sum_mismatch_items!,
    misplacedEvents: r.misplaced_events!,
  };
}

export function writeSideClean(a: WriteSideAudit): boolean {
  return (
    a.lastSeq === a.outboxRows &&
    a.seqGapPartitions === 0 &&
    a.versionMismatchPairs === 0 &&
    a.deltaSumMismatchItems === 0 &&
    a.misplacedEvents === 0
  );
}

/**
 * Read side, per (item, partition) row and summed per item: the shared read-side audit
 * (src/counters/counter-audit.ts) on LIKE_COUNTER.
 *  exact_violations: n + sum(delta of unprocessed events with seq > base_seq) <> facts
 *  bound_violations: |n - facts| > unprocessed events of the item
 *  unprocessed_over_lag: more unprocessed events than lag says (must be false)
 */
export const READ_SIDE_SQL = counterReadSideSql(LIKE_COUNTER);

export interface ReadSideAudit {
  lastSeq: number;
  watermark: number;
  lag: number;
  unprocessed: number;
  countMismatchItems: number;
  maxAbsErr: number;
  exactViolations: number;
  boundViolations: number;
  unprocessedOverLag: boolean;
}

export async function readSide(pool: Pool): Promise<ReadSideAudit> {
  const { countMismatchKeys, ...rest } = await readCounterSide(pool, LIKE_COUNTER);
  return { ...rest, countMismatchItems: countMismatchKeys };
}

export function readSideClean(a: ReadSideAudit): boolean {
  return counterReadSideClean({ ...a, countMismatchKeys: a.countMismatchItems });
}

export function formatWriteSide(a: WriteSideAudit): string {
  return (
    `last_seq=${a.lastSeq} outbox_rows=${a.outboxRows} version_mismatch_pairs=${a.versionMismatchPairs} ` +
    `delta_sum_mismatch_items=${a.deltaSumMismatchItems} seq_gap_partitions=${a.seqGapPartitions} misplaced_events=${a.misplacedEvents}`
  );
}

export function formatReadSide(a: ReadSideAudit): string {
  return (
    `last_seq=${a.lastSeq} watermark=${a.watermark} lag=${a.lag} unprocessed=${a.unprocessed} ` +
    `count_mismatch_items=${a.countMismatchItems} max_abs_err=${a.maxAbsErr} exact_violations=${a.exactViolations} ` +
    `bound_violations=${a.boundViolations}`
  );
}
