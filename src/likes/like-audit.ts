import type { Pool } from "../db/pool.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import type { LikeCountReading } from "./types.ts";

/**
 * The read side and the invariant checks of chapter 32. Each function is one SQL statement,
 * so every figure it returns comes from one snapshot; an operator can paste the SQL into psql.
 */

/**
 * lag = sum over partitions of (like_seq.last - applied_upto), and pendingForItem = the item's
 * events above each partition's watermark that are not yet processed. The pending count is an
 * aggregate in a LATERAL subquery, which the planner cannot pull up into a join: it stays one
 * range read on like_outbox_item_seq (item_id, part, seq > applied_upto) per partition, so its
 * cost follows the backlog, not the item's whole outbox history.
 */
export const READ_COUNT_SQL = `
  SELECT (SELECT coalesce(sum(n), 0) FROM like_count WHERE item_id = $1)::bigint AS n,
         coalesce(sum(s.last - w.applied_upto), 0)::bigint AS lag,
         coalesce(sum(p.pending), 0)::bigint AS pending_for_item
    FROM like_seq s
    JOIN counter_watermark w USING (part)
    CROSS JOIN LATERAL (
      SELECT count(*) AS pending
        FROM like_outbox o
       WHERE o.item_id = $1 AND o.part = w.part AND o.seq > w.applied_upto
         AND NOT EXISTS (SELECT 1 FROM processed_event pe WHERE pe.part = o.part AND pe.seq = o.seq)) p`;

export async function readCount(pool: Pool, itemId: string, allowedLag: number): Promise<LikeCountReading> {
  validateId("itemId", itemId);
  validateNonNegativeInteger("allowedLag", allowedLag);
  // A named statement is parsed and planned once per connection; planning was most of an
  // unnamed call's server time.
  const { rows } = await pool.query<{ n: number; lag: number; pending_for_item: number }>({
    name: "like_read_count", text: READ_COUNT_SQL, values: [itemId],
  });
  const row = rows[0]!;
  return { n: row.n, lag: row.lag, pendingForItem: row.pending_for_item, stale: row.lag > allowedLag };
}

/**
 * Write side: the facts and the outbox move together. Per partition the sequence is
 * gapless (last = row count = max seq); every pair's version equals its number of events
 * and its liked flag equals its delta sum; every event sits in its user's partition.
 */
export const WRITE_SIDE_SQL = `
  WITH cfg AS (SELECT partitions FROM ledger_config),
  per_part AS (
    SELECT s.part, s.last, count(o.seq) AS rows, coalesce(max(o.seq), 0) AS max_seq
      FROM like_seq s LEFT JOIN like_outbox o ON o.part = s.part
     GROUP BY s.part, s.last),
  pair_events AS (
    SELECT user_id, item_id, count(*) AS events, sum(delta) AS delta_sum
      FROM like_outbox GROUP BY user_id, item_id),
  item_facts AS (
    SELECT item_id, count(*) FILTER (WHERE liked) AS liked FROM like_fact GROUP BY item_id),
  item_deltas AS (
    SELECT item_id, sum(delta) AS delta_sum FROM like_outbox GROUP BY item_id)
  SELECT (SELECT coalesce(sum(last), 0) FROM per_part)::bigint AS last_seq,
         (SELECT count(*) FROM like_outbox)::bigint AS outbox_rows,
         (SELECT count(*) FROM per_part WHERE rows <> last OR max_seq <> last)::bigint AS seq_gap_partitions,
         (SELECT count(*) FROM like_fact f LEFT JOIN pair_events e USING (user_id, item_id)
           WHERE f.version <> coalesce(e.events, 0)
              OR f.liked::int <> coalesce(e.delta_sum, 0))::bigint AS version_mismatch_pairs,
         (SELECT count(*) FROM item_facts f FULL JOIN item_deltas d USING (item_id)
           WHERE coalesce(f.liked, 0) <> coalesce(d.delta_sum, 0))::bigint AS delta_sum_mismatch_items,
         (SELECT count(*) FROM like_outbox o, cfg
           WHERE o.part <> ledger_partition(o.user_id, cfg.partitions))::bigint AS misplaced_events`;

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
    lastSeq: r.last_seq!, outboxRows: r.outbox_rows!, seqGapPartitions: r.seq_gap_partitions!,
    versionMismatchPairs: r.version_mismatch_pairs!, deltaSumMismatchItems: r.delta_sum_mismatch_items!,
    misplacedEvents: r.misplaced_events!,
  };
}

export function writeSideClean(a: WriteSideAudit): boolean {
  return a.lastSeq === a.outboxRows && a.seqGapPartitions === 0 && a.versionMismatchPairs === 0 &&
    a.deltaSumMismatchItems === 0 && a.misplacedEvents === 0;
}

/**
 * Read side, per (item, partition) row and summed per item:
 *  exact_violations: n + sum(delta of unprocessed events with seq > base_seq) <> facts
 *  bound_violations: |n - facts| > unprocessed events of the item
 *  unprocessed_over_lag: more unprocessed events than lag says (must be false)
 */
export const READ_SIDE_SQL = `
  WITH cfg AS (SELECT partitions FROM ledger_config),
  wm AS (SELECT s.part, s.last, w.applied_upto FROM like_seq s JOIN counter_watermark w USING (part)),
  unprocessed AS (
    SELECT o.part, o.seq, o.item_id, o.delta
      FROM like_outbox o JOIN wm ON wm.part = o.part AND o.seq > wm.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM processed_event pe WHERE pe.part = o.part AND pe.seq = o.seq)),
  facts AS (
    SELECT f.item_id, ledger_partition(f.user_id, cfg.partitions) AS part, count(*) AS c
      FROM like_fact f, cfg WHERE f.liked GROUP BY 1, 2),
  rows_ AS (
    SELECT coalesce(lc.item_id, f.item_id, u.item_id) AS item_id,
           coalesce(lc.part, f.part, u.part) AS part,
           coalesce(lc.n, 0) AS n, coalesce(lc.base_seq, 0) AS base_seq, coalesce(f.c, 0) AS facts
      FROM like_count lc
      FULL JOIN facts f ON f.item_id = lc.item_id AND f.part = lc.part
      FULL JOIN (SELECT DISTINCT item_id, part FROM unprocessed) u
             ON u.item_id = coalesce(lc.item_id, f.item_id) AND u.part = coalesce(lc.part, f.part)),
  per_row AS (
    SELECT r.item_id, r.part, r.n, r.facts,
           (SELECT count(*) FROM unprocessed u WHERE u.item_id = r.item_id AND u.part = r.part) AS pending,
           (SELECT coalesce(sum(u.delta), 0) FROM unprocessed u
             WHERE u.item_id = r.item_id AND u.part = r.part AND u.seq > r.base_seq) AS pending_delta
      FROM rows_ r),
  per_item AS (
    SELECT item_id, sum(n) AS n, sum(facts) AS facts, sum(pending) AS pending,
           bool_or(n + pending_delta <> facts) AS exact_broken
      FROM per_row GROUP BY item_id)
  SELECT (SELECT sum(last) FROM wm)::bigint AS last_seq,
         (SELECT sum(applied_upto) FROM wm)::bigint AS watermark,
         (SELECT sum(last - applied_upto) FROM wm)::bigint AS lag,
         (SELECT count(*) FROM unprocessed)::bigint AS unprocessed,
         (SELECT count(*) FROM per_item WHERE n <> facts)::bigint AS count_mismatch_items,
         (SELECT coalesce(max(abs(n - facts)), 0) FROM per_item)::bigint AS max_abs_err,
         (SELECT count(*) FROM per_item WHERE exact_broken)::bigint AS exact_violations,
         (SELECT count(*) FROM per_item WHERE abs(n - facts) > pending)::bigint AS bound_violations,
         ((SELECT count(*) FROM unprocessed) > (SELECT sum(last - applied_upto) FROM wm)) AS unprocessed_over_lag`;

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
  const { rows } = await pool.query(READ_SIDE_SQL);
  const r = rows[0] as Record<string, number> & { unprocessed_over_lag: boolean };
  return {
    lastSeq: r.last_seq!, watermark: r.watermark!, lag: r.lag!, unprocessed: r.unprocessed!,
    countMismatchItems: r.count_mismatch_items!, maxAbsErr: r.max_abs_err!, exactViolations: r.exact_violations!,
    boundViolations: r.bound_violations!, unprocessedOverLag: r.unprocessed_over_lag,
  };
}

export function readSideClean(a: ReadSideAudit): boolean {
  return a.exactViolations === 0 && a.boundViolations === 0 && !a.unprocessedOverLag;
}

export function formatWriteSide(a: WriteSideAudit): string {
  return `last_seq=${a.lastSeq} outbox_rows=${a.outboxRows} version_mismatch_pairs=${a.versionMismatchPairs} ` +
    `delta_sum_mismatch_items=${a.deltaSumMismatchItems} seq_gap_partitions=${a.seqGapPartitions} misplaced_events=${a.misplacedEvents}`;
}

export function formatReadSide(a: ReadSideAudit): string {
  return `last_seq=${a.lastSeq} watermark=${a.watermark} lag=${a.lag} unprocessed=${a.unprocessed} ` +
    `count_mismatch_items=${a.countMismatchItems} max_abs_err=${a.maxAbsErr} exact_violations=${a.exactViolations} ` +
    `bound_violations=${a.boundViolations}`;
}
