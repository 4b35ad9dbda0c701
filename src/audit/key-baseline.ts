/**
 * The stored per-key truths that let the periodic audit check a hot key by induction instead of
 * recounting all its facts (the table audit_key_baseline, docs/counters.md "Hot keys: audited by induction"):
 * which touched keys a run may audit so, and how a clean run stores the truths it computed.
 */
import type { PoolClient } from "../db/pool.ts";

/** Below this many counted facts a touched key is recounted in full (cheap, and a recount also sees a fact changed without an event). */
export const DEFAULT_RECOUNT_ABOVE = 10_000;

/**
 * The CTE `inducted(key)` of a statement that has the range CTEs `r` and `ev` (incremental-invariants.ts),
 * $4 (sampled keys) and $5 (the threshold; NULL: induction off): the keys with an event in the
 * range, not sampled (the rotating sample always recounts), whose baseline has a row for every
 * partition of the range, each at exactly that partition's `from` (r.lo), totalling at least $5.
 * A row at any other position (the section was held, fell back to its full form, or a run crashed
 * between its snapshot and its store) is stale: the key is recounted.
 */
export function inductedSql(section: string, keyColumn: string): string {
  return `
  inducted AS (
    SELECT b.key FROM audit_key_baseline b JOIN r ON r.part = b.part AND b.upto = r.lo
     WHERE b.section = '${section}'
       AND b.key = ANY (ARRAY(SELECT ev.${keyColumn} FROM ev EXCEPT SELECT unnest($4::text[])))
     GROUP BY b.key
    HAVING count(*) = (SELECT count(*) FROM r) AND sum(b.truth) >= $5::bigint)`;
}

/** What a statement returns for the store: the truths at `to` of its keys at or above the threshold, and its keys whose stored rows must go. */
export interface KeyBaselines {
  baselines: { key: string; part: number; truth: number }[];
  droppedBaselines: string[];
}

/**
 * In the transaction that moves a clean section's cursors from `from` to `to`: (1) every row at
 * its partition's `from` moves to its `to` (a key without an event in the range has the same
 * truth there; every key with one is rewritten or dropped next), (2) the truths the run computed
 * at `to` are written (never over a row further on: a concurrent later run's), (3) the audited
 * keys that fell below the threshold lose theirs.
 */
export async function storeKeyBaselines(
  client: PoolClient,
  section: string,
  range: { parts: number[]; from: number[]; to: number[] },
  computed: KeyBaselines,
): Promise<void> {
  await client.query(
    `UPDATE audit_key_baseline b SET upto = r.hi FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS r(part, lo, hi)
      WHERE b.section = $1 AND b.part = r.part AND b.upto = r.lo AND r.hi > r.lo`,
    [section, range.parts, range.from, range.to],
  );
  await client.query(
    `INSERT INTO audit_key_baseline AS b (section, key, part, truth, upto)
     SELECT $1, x.key, x.part, x.truth, r.hi
       FROM jsonb_to_recordset($2::jsonb) AS x(key text, part int, truth bigint)
       JOIN unnest($3::int[], $4::bigint[]) AS r(part, hi) ON r.part = x.part
     ON CONFLICT (section, key, part) DO UPDATE SET truth = EXCLUDED.truth, upto = EXCLUDED.upto WHERE b.upto <= EXCLUDED.upto`,
    [section, JSON.stringify(computed.baselines), range.parts, range.to],
  );
  await client.query("DELETE FROM audit_key_baseline WHERE section = $1 AND key = ANY ($2::text[])", [
    section,
    computed.droppedBaselines,
  ]);
}
