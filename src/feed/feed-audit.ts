import type { Pool, PoolClient } from "../db/pool.ts";

export interface FeedAudit {
  /** Readers with an inbox or a truth (of those audited: every reader in the full form, the touched and sampled ones in the periodic audit's). */
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
  return feedAuditOf(pool, FEED_AUDIT_SQL, [maxItems]);
}

/** The invariant over these readers only (feed_audit_readers): the periodic audit's touched and sampled readers. */
export const FEED_AUDIT_READERS_SQL = `SELECT * FROM feed_audit_readers($1::text[], $2)`;

export async function auditFeedReaders(db: Pool | PoolClient, readers: string[], maxItems: number): Promise<FeedAudit> {
  return feedAuditOf(db, FEED_AUDIT_READERS_SQL, [readers, maxItems]);
}

async function feedAuditOf(db: Pool | PoolClient, sql: string, values: unknown[]): Promise<FeedAudit> {
  const { rows } = await db.query<{
    readers: number;
    extra: number;
    missing: number;
    over_cap: number;
    below_horizon: number;
    explained_by_pending: number;
    lag: number;
  }>(sql, values);
  const r = rows[0]!;
  const skipped = await db.query<{ n: number }>(SKIPPED_READERS_SQL);
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

/** Which audit ran the feed invariant: the periodic one in `serve`, or the full one (`social-ledger audit`, GET /v1/admin/audit). */
export type FeedAuditSource = "periodic" | "full";

/**
 * Records the feed figures of an audit that ran the invariant (feed_audit_run), whichever audit
 * it was: ledger_feed_drift_rows_total adds them up, by any process. Returns the run's id.
 */
export async function recordFeedAudit(pool: Pool, a: FeedAudit, source: FeedAuditSource): Promise<number> {
  const { rows } = await pool.query<{ run_id: number }>(
    "INSERT INTO feed_audit_run (source, extra, missing, skipped_readers) VALUES ($1, $2, $3, $4) RETURNING run_id",
    [source, a.extra, a.missing, a.skippedReaders],
  );
  return Number(rows[0]!.run_id);
}

/** One source outbox of the feed in one partition: its sequence, the feed's watermark, the events above it. */
export interface FeedWatermark {
  source: "posts" | "relations";
  part: number;
  last: number;
  appliedUpto: number;
  lag: number;
}

/** What /metrics shows of the feed: its two consumers' watermarks and lag per partition, the drift its audits found and its rebuilds changed. */
export interface FeedFigures {
  watermarks: FeedWatermark[];
  /** Sums over feed_audit_run: rows the audits (periodic and full) found extra or missing (lies, not lag). */
  drift: { runs: number; extra: number; missing: number };
  /** Sums over feed_rebuild_run: inbox rows the rebuilds added and removed. */
  rebuild: { runs: number; added: number; removed: number };
  /** Readers fan-out skips now as absent. */
  skippedReaders: number;
}

export async function readFeedFigures(pool: Pool): Promise<FeedFigures> {
  const [watermarks, drift, rebuild, skipped] = await Promise.all([
    pool.query<{ source: FeedWatermark["source"]; part: number; last: number; applied_upto: number }>(
      `SELECT 'posts' AS source, s.part, s.last, w.applied_upto FROM post_seq s JOIN feed_post_watermark w USING (part)
       UNION ALL
       SELECT 'relations', s.part, s.last, w.applied_upto FROM event_seq s JOIN feed_relation_watermark w USING (part)
       ORDER BY 1, 2`,
    ),
    pool.query<{ runs: number; extra: number; missing: number }>(
      "SELECT count(*)::int AS runs, coalesce(sum(extra), 0)::bigint AS extra, coalesce(sum(missing), 0)::bigint AS missing FROM feed_audit_run",
    ),
    pool.query<{ runs: number; added: number; removed: number }>(
      "SELECT count(*)::int AS runs, coalesce(sum(rows_added), 0)::bigint AS added, coalesce(sum(rows_removed), 0)::bigint AS removed FROM feed_rebuild_run",
    ),
    pool.query<{ n: number }>(SKIPPED_READERS_SQL),
  ]);
  const d = drift.rows[0]!;
  const r = rebuild.rows[0]!;
  return {
    watermarks: watermarks.rows.map((r) => ({
      source: r.source,
      part: r.part,
      last: Number(r.last),
      appliedUpto: Number(r.applied_upto),
      lag: Number(r.last) - Number(r.applied_upto),
    })),
    drift: { runs: d.runs, extra: Number(d.extra), missing: Number(d.missing) },
    rebuild: { runs: r.runs, added: Number(r.added), removed: Number(r.removed) },
    skippedReaders: skipped.rows[0]!.n,
  };
}
