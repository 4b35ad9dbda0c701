import type { Pool } from "./pool.ts";
import { withTransaction } from "./transaction.ts";
import { REBUILD_LOCK_KEY } from "../likes/like-rebuild.ts";

export interface PruneReport {
  /** False when a like rebuild was running: nothing was pruned (try again later). */
  pruned: boolean;
  processedEventRows: number;
  projSeenRows: number;
}

/**
 * Retention for the dedup keys: deletes processed_event and proj_seen rows at or below their
 * partition's watermark. Safe because (1) both consumers answer "dup" for any delivered seq at or
 * below the watermark without consulting the keys, and the watermark only grows; (2) a like
 * rebuild reads processed_event above its snapshot S_p, which may be below the watermark, so the
 * prune takes the rebuild's advisory lock and prunes nothing while one runs; a rebuild that starts
 * later takes S_p >= today's watermark. READ_COUNT_SQL and the audits read keys above the
 * watermark only. The outbox and relation_event are kept: the write-side audits count them.
 */
export async function pruneDedupKeys(pool: Pool): Promise<PruneReport> {
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [REBUILD_LOCK_KEY]);
    if (!rows[0]!.ok) return { pruned: false, processedEventRows: 0, projSeenRows: 0 };
    const likes = await client.query(
      "DELETE FROM processed_event pe USING counter_watermark w WHERE pe.part = w.part AND pe.seq <= w.applied_upto",
    );
    const relations = await client.query(
      "DELETE FROM proj_seen s USING proj_watermark w WHERE s.part = w.part AND s.seq <= w.applied_upto",
    );
    return { pruned: true, processedEventRows: likes.rowCount ?? 0, projSeenRows: relations.rowCount ?? 0 };
  });
}
