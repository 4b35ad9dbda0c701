import type { Pool } from "../db/pool.ts";
import type { CounterSpec } from "./counter-spec.ts";

/**
 * The invariants of a counted fact, one SQL statement each so an operator can paste it into
 * psql. Both compare with spec.countedSql, the one definition of what is counted. Outbox events
 * pruned by retention count through their baseline (retention_floor, spec.prunedDeltasSql).
 */
export interface CounterAudit {
  lag: number;
  /** Partitions whose outbox is not exactly 1..last. */
  seqGapPartitions: number;
  /** Keys whose outbox delta sum differs from their counted facts (write side). */
  deltaSumMismatchKeys: number;
  /** Keys whose |count - counted facts| exceeds their unprocessed events (the read's error bound). */
  boundViolations: number;
  /** Keys whose count differs from the counted facts at all (0 expected whenever lag = 0). */
  countMismatchKeys: number;
  /** Count rows or key sums below zero: reported, never clamped. */
  negativeCounts: number;
}

export function counterAuditSql(s: CounterSpec): string {
  return `
  WITH truth AS (SELECT key, sum(n)::bigint AS n FROM (${s.countedSql}) t GROUP BY key),
  derived AS (SELECT ${s.keyColumn} AS key, sum(n)::bigint AS n FROM ${s.count} GROUP BY 1),
  deltas AS (
    SELECT key, sum(n)::bigint AS n
      FROM (SELECT ${s.keyColumn} AS key, delta AS n FROM ${s.outbox}${s.prunedDeltasSql ? ` UNION ALL ${s.prunedDeltasSql}` : ""}) d
     GROUP BY 1),
  pending AS (
    SELECT o.${s.keyColumn} AS key, count(*)::bigint AS n
      FROM ${s.outbox} o JOIN ${s.watermark} w ON w.part = o.part
     WHERE o.seq > w.applied_upto AND NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq)
     GROUP BY 1),
  keys AS (SELECT key FROM truth UNION SELECT key FROM derived UNION SELECT key FROM deltas),
  per_key AS (
    SELECT k.key, coalesce(t.n, 0) AS truth, coalesce(d.n, 0) AS derived, coalesce(x.n, 0) AS deltas, coalesce(p.n, 0) AS pending
      FROM keys k LEFT JOIN truth t USING (key) LEFT JOIN derived d USING (key) LEFT JOIN deltas x USING (key) LEFT JOIN pending p USING (key)),
  gaps AS (
    SELECT q.part FROM ${s.sequence} q LEFT JOIN ${s.outbox} o ON o.part = q.part
      LEFT JOIN retention_floor f ON f.kind = '${s.kind}' AND f.part = q.part
     GROUP BY q.part, q.last
    HAVING count(o.seq) + coalesce(min(f.pruned_events), 0) <> q.last
        OR greatest(coalesce(max(o.seq), 0), min(f.pruned_max_seq)) <> q.last)
  SELECT (SELECT coalesce(sum(q.last - w.applied_upto), 0) FROM ${s.sequence} q JOIN ${s.watermark} w USING (part))::bigint AS lag,
         (SELECT count(*) FROM gaps)::int AS seq_gap_partitions,
         (SELECT count(*) FROM per_key WHERE deltas <> truth)::int AS delta_sum_mismatch_keys,
         (SELECT count(*) FROM per_key WHERE abs(derived - truth) > pending)::int AS bound_violations,
         (SELECT count(*) FROM per_key WHERE derived <> truth)::int AS count_mismatch_keys,
         ((SELECT count(*) FROM ${s.count} WHERE n < 0) + (SELECT count(*) FROM per_key WHERE derived < 0))::int AS negative_counts`;
}

export async function auditCounter(pool: Pool, spec: CounterSpec): Promise<CounterAudit> {
  const { rows } = await pool.query<Record<string, number>>(counterAuditSql(spec));
  const r = rows[0]!;
  return {
    lag: r.lag!,
    seqGapPartitions: r.seq_gap_partitions!,
    deltaSumMismatchKeys: r.delta_sum_mismatch_keys!,
    boundViolations: r.bound_violations!,
    countMismatchKeys: r.count_mismatch_keys!,
    negativeCounts: r.negative_counts!,
  };
}

/** Clean: no gap, deltas match the facts, every count within its bound, no negative count (and exact when lag is 0). */
export function counterAuditClean(a: CounterAudit): boolean {
  return (
    a.seqGapPartitions === 0 &&
    a.deltaSumMismatchKeys === 0 &&
    a.boundViolations === 0 &&
    a.negativeCounts === 0 &&
    (a.lag > 0 || a.countMismatchKeys === 0)
  );
}

export function formatCounterAudit(kind: string, a: CounterAudit): string {
  return (
    `${kind}: lag=${a.lag} seq_gap_partitions=${a.seqGapPartitions} delta_sum_mismatch_keys=${a.deltaSumMismatchKeys} ` +
    `bound_violations=${a.boundViolations} count_mismatch_keys=${a.countMismatchKeys} negative_counts=${a.negativeCounts}`
  );
}

/**
 * The read side of a counter in detail, per (key, partition) row and summed per key:
 *  exact_violations: n + sum(delta of unprocessed events with seq > base_seq) <> facts
 *  bound_violations: |n - facts| > unprocessed events of the key
 *  unprocessed_over_lag: more unprocessed events than lag says (must be false)
 */
export interface CounterReadSide {
  lastSeq: number;
  watermark: number;
  lag: number;
  unprocessed: number;
  countMismatchKeys: number;
  maxAbsErr: number;
  exactViolations: number;
  boundViolations: number;
  unprocessedOverLag: boolean;
}

export function counterReadSideSql(s: CounterSpec): string {
  return `
  WITH wm AS (SELECT q.part, q.last, w.applied_upto FROM ${s.sequence} q JOIN ${s.watermark} w USING (part)),
  unprocessed AS (
    SELECT o.part, o.seq, o.${s.keyColumn} AS key, o.delta
      FROM ${s.outbox} o JOIN wm ON wm.part = o.part AND o.seq > wm.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq)),
  facts AS (SELECT key, part, n AS c FROM (${s.countedSql}) t),
  rows_ AS (
    SELECT coalesce(c.${s.keyColumn}, f.key, u.key) AS key,
           coalesce(c.part, f.part, u.part) AS part,
           coalesce(c.n, 0) AS n, coalesce(c.base_seq, 0) AS base_seq, coalesce(f.c, 0) AS facts
      FROM ${s.count} c
      FULL JOIN facts f ON f.key = c.${s.keyColumn} AND f.part = c.part
      FULL JOIN (SELECT DISTINCT key, part FROM unprocessed) u
             ON u.key = coalesce(c.${s.keyColumn}, f.key) AND u.part = coalesce(c.part, f.part)),
  per_row AS (
    SELECT r.key, r.part, r.n, r.facts,
           (SELECT count(*) FROM unprocessed u WHERE u.key = r.key AND u.part = r.part) AS pending,
           (SELECT coalesce(sum(u.delta), 0) FROM unprocessed u
             WHERE u.key = r.key AND u.part = r.part AND u.seq > r.base_seq) AS pending_delta
      FROM rows_ r),
  per_key AS (
    SELECT key, sum(n) AS n, sum(facts) AS facts, sum(pending) AS pending,
           bool_or(n + pending_delta <> facts) AS exact_broken
      FROM per_row GROUP BY key)
  SELECT (SELECT sum(last) FROM wm)::bigint AS last_seq,
         (SELECT sum(applied_upto) FROM wm)::bigint AS watermark,
         (SELECT sum(last - applied_upto) FROM wm)::bigint AS lag,
         (SELECT count(*) FROM unprocessed)::bigint AS unprocessed,
         (SELECT count(*) FROM per_key WHERE n <> facts)::bigint AS count_mismatch_keys,
         (SELECT coalesce(max(abs(n - facts)), 0) FROM per_key)::bigint AS max_abs_err,
         (SELECT count(*) FROM per_key WHERE exact_broken)::bigint AS exact_violations,
         (SELECT count(*) FROM per_key WHERE abs(n - facts) > pending)::bigint AS bound_violations,
         ((SELECT count(*) FROM unprocessed) > (SELECT sum(last - applied_upto) FROM wm)) AS unprocessed_over_lag`;
}

export async function readCounterSide(pool: Pool, spec: CounterSpec): Promise<CounterReadSide> {
  const { rows } = await pool.query(counterReadSideSql(spec));
  const r = rows[0] as Record<string, number> & { unprocessed_over_lag: boolean };
  return {
    lastSeq: r.last_seq!,
    watermark: r.watermark!,
    lag: r.lag!,
    unprocessed: r.unprocessed!,
    countMismatchKeys: r.count_mismatch_keys!,
    maxAbsErr: r.max_abs_err!,
    exactViolations: r.exact_violations!,
    boundViolations: r.bound_violations!,
    unprocessedOverLag: r.unprocessed_over_lag,
  };
}

export function counterReadSideClean(a: CounterReadSide): boolean {
  return a.exactViolations === 0 && a.boundViolations === 0 && !a.unprocessedOverLag;
}
