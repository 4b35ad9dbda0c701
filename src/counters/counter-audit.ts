import type { Pool } from "../db/pool.ts";
import type { CounterSpec } from "./counter-spec.ts";

/**
 * The invariants of a counted fact, one SQL statement each so an operator can paste it into
 * psql. Both compare with spec.countedSql, the one definition of what is counted.
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
  deltas AS (SELECT ${s.keyColumn} AS key, sum(delta)::bigint AS n FROM ${s.outbox} GROUP BY 1),
  pending AS (
    SELECT o.${s.keyColumn} AS key, count(*)::bigint AS n
      FROM ${s.outbox} o JOIN ${s.watermark} w ON w.part = o.part
     WHERE NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq)
     GROUP BY 1),
  keys AS (SELECT key FROM truth UNION SELECT key FROM derived UNION SELECT key FROM deltas),
  per_key AS (
    SELECT k.key, coalesce(t.n, 0) AS truth, coalesce(d.n, 0) AS derived, coalesce(x.n, 0) AS deltas, coalesce(p.n, 0) AS pending
      FROM keys k LEFT JOIN truth t USING (key) LEFT JOIN derived d USING (key) LEFT JOIN deltas x USING (key) LEFT JOIN pending p USING (key)),
  gaps AS (
    SELECT q.part FROM ${s.sequence} q LEFT JOIN ${s.outbox} o ON o.part = q.part
     GROUP BY q.part, q.last HAVING count(o.seq) <> q.last OR coalesce(max(o.seq), 0) <> q.last)
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
    lag: r.lag!, seqGapPartitions: r.seq_gap_partitions!, deltaSumMismatchKeys: r.delta_sum_mismatch_keys!,
    boundViolations: r.bound_violations!, countMismatchKeys: r.count_mismatch_keys!, negativeCounts: r.negative_counts!,
  };
}

/** Clean: no gap, deltas match the facts, every count within its bound, no negative count (and exact when lag is 0). */
export function counterAuditClean(a: CounterAudit): boolean {
  return a.seqGapPartitions === 0 && a.deltaSumMismatchKeys === 0 && a.boundViolations === 0 && a.negativeCounts === 0 &&
    (a.lag > 0 || a.countMismatchKeys === 0);
}

export function formatCounterAudit(kind: string, a: CounterAudit): string {
  return `${kind}: lag=${a.lag} seq_gap_partitions=${a.seqGapPartitions} delta_sum_mismatch_keys=${a.deltaSumMismatchKeys} ` +
    `bound_violations=${a.boundViolations} count_mismatch_keys=${a.countMismatchKeys} negative_counts=${a.negativeCounts}`;
}
