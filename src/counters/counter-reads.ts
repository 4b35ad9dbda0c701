import type { Pool } from "../db/pool.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import type { CounterSpec, CountReading } from "./counter-spec.ts";

/**
 * The count of one key with its lag and error bound, in one statement (one snapshot):
 * n = sum of the key's count rows, lag = sum over partitions of (last - applied_upto), and
 * pending = the key's events above each watermark not yet processed, so |n - truth| <= pending.
 * The pending count is a correlated subquery per partition, which the planner cannot pull up
 * into a join: with an outbox index on (key, part, seq) it stays one range read per partition
 * above the watermark, so its cost follows the backlog, not the key's whole outbox history. It
 * sits in a CASE that runs it only for a partition whose watermark is below its sequence: a
 * caught-up partition has no event above its watermark, and its probe of the index (a descent
 * per partition, most of what a drained read at P = 16 cost) is skipped.
 * The NOT EXISTS is fenced with OFFSET 0 so it stays a per-event probe of the processed table:
 * after retention emptied that table (pages not yet vacuumed, statistics saying "almost empty")
 * the planner otherwise chose a merge anti join over its whole primary-key index, ~65x slower
 * (test/likes/read-count-after-prune.test.ts).
 *
 * The key is read as `(SELECT $1::text)`, an InitPlan, never as the bare parameter: a custom plan
 * then cannot see the key's value either, so it is the generic plan plus the cost of planning, and
 * after its five custom trials the plan cache keeps the generic plan for the connection. With the
 * bare `$1`, on skewed data (one hot key, many cold ones) every custom plan of a cold key was
 * estimated cheaper than the generic one, so the statement was planned again on every call
 * (planning cost more than executing it). docs/write-path.md, "Count reads".
 */
export function readCountSql(s: CounterSpec): string {
  const key = "(SELECT $1::text)";
  return `
  SELECT (SELECT coalesce(sum(n), 0) FROM ${s.count} WHERE ${s.keyColumn} = ${key})::bigint AS n,
         coalesce(sum(q.last - w.applied_upto), 0)::bigint AS lag,
         coalesce(sum(CASE WHEN q.last > w.applied_upto THEN (
           SELECT count(*)
             FROM ${s.outbox} o
            WHERE o.${s.keyColumn} = ${key} AND o.part = w.part AND o.seq > w.applied_upto
              AND NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq OFFSET 0)) END), 0)::bigint AS pending
    FROM ${s.sequence} q
    JOIN ${s.watermark} w USING (part)`;
}

export async function readCounter(
  pool: Pool,
  spec: CounterSpec,
  key: string,
  allowedLag: number,
): Promise<CountReading> {
  validateId(spec.keyName, key);
  validateNonNegativeInteger("allowedLag", allowedLag);
  // A named statement is parsed once per connection and, by the shape of readCountSql, planned
  // at most six times (five custom trials and the generic plan it then keeps).
  const { rows } = await pool.query<{ n: number; lag: number; pending: number }>({
    name: `${spec.kind}_read_count`,
    text: readCountSql(spec),
    values: [key],
  });
  const r = rows[0]!;
  return { n: r.n, lag: r.lag, pending: r.pending, stale: r.lag > allowedLag };
}
