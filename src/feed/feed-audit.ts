import type { Pool } from "../db/pool.ts";

export interface FeedAudit {
  /** Readers with an inbox or a truth. */
  readers: number;
  /** Inbox rows the truth does not give (and no pending event explains): a post shown to a reader it should not reach. */
  extra: number;
  /** Truth rows the inbox lacks (and no pending event explains). */
  missing: number;
  /** Inboxes holding more than the cap. */
  overCap: number;
  /** Inbox rows at or below their reader's horizon. */
  belowHorizon: number;
  /** Differences with an event not yet applied: lag, not a lie. */
  explainedByPending: number;
  /** Post and relation events above the feed's watermarks, all partitions. */
  lag: number;
  /** Readers fan-out skipped as absent (docs/feed.md, "Absent readers"): their inboxes may lack rows, none is counted missing. */
  skippedReaders: number;
}

/** THE feed invariant, the SQL function feed_audit (docs/feed.md, "The invariant"). */
export const FEED_AUDIT_SQL = `SELECT * FROM feed_audit($1)`;

const SKIPPED_READERS_SQL = "SELECT count(*)::int AS n FROM feed_reader WHERE skipped_since IS NOT NULL";

export async function auditFeed(pool: Pool, maxItems: number): Promise<FeedAudit> {
  const { rows } = await pool.query<{
    readers: number;
    extra: number;
    missing: number;
    over_cap: number;
    below_horizon: number;
    explained_by_pending: number;
    lag: number;
  }>(FEED_AUDIT_SQL, [maxItems]);
  const r = rows[0]!;
  const skipped = await pool.query<{ n: number }>(SKIPPED_READERS_SQL);
  return {
    readers: r.readers,
    extra: r.extra,
    missing: r.missing,
    overCap: r.over_cap,
    belowHorizon: r.below_horizon,
    explainedByPending: r.explained_by_pending,
    lag: r.lag,
    skippedReaders: skipped.rows[0]!.n,
  };
}

export function feedAuditClean(a: FeedAudit): boolean {
  return a.extra === 0 && a.missing === 0 && a.overCap === 0 && a.belowHorizon === 0;
}

export function formatFeedAudit(a: FeedAudit): string {
  return `readers=${a.readers} extra=${a.extra} missing=${a.missing} over_cap=${a.overCap} below_horizon=${a.belowHorizon} pending=${a.explainedByPending} lag=${a.lag} skipped_readers=${a.skippedReaders}`;
}
