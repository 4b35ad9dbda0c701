import type { Pool } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";

/**
 * The chapter's invariants, one SQL statement each, so an operator can paste them into psql.
 * Every query returns the number of violating rows; 0 everywhere means healthy.
 */
export const RELATION_INVARIANTS = {
  /** 1. one row per ordered pair (the primary key), a known state, no self-follow. */
  invalidRows: `SELECT count(*)::int AS n FROM relation WHERE follower = followee OR state NOT IN ('ACTIVE', 'PENDING', 'REMOVED')`,
  /** 2. version = number of events of the pair, and the newest event carries the row's state. */
  versionMismatchPairs: `
    SELECT count(*)::int AS n FROM relation r
      LEFT JOIN LATERAL (SELECT count(*) AS events, max(version) AS max_version FROM relation_event e
                          WHERE e.follower = r.follower AND e.followee = r.followee) c ON true
      LEFT JOIN relation_event last ON last.follower = r.follower AND last.followee = r.followee AND last.version = r.version
     WHERE r.version <> c.events OR (r.version > 0 AND (last.state IS DISTINCT FROM r.state OR c.max_version <> r.version))`,
  /** 3. a block in either direction leaves both relation rows REMOVED. */
  blockedButNotRemoved: `
    SELECT count(*)::int AS n FROM block b
      JOIN relation r ON (r.follower = b.blocker AND r.followee = b.blocked) OR (r.follower = b.blocked AND r.followee = b.blocker)
     WHERE r.state <> 'REMOVED'`,
  /** 4 (and the state machine): consecutive versions of a pair only make legal transitions. */
  illegalTransitions: `
    SELECT count(*)::int AS n FROM relation_event e
      LEFT JOIN relation_event p ON p.follower = e.follower AND p.followee = e.followee AND p.version = e.version - 1
     WHERE (coalesce(p.state, 'REMOVED'), e.state) NOT IN
           (('REMOVED', 'ACTIVE'), ('REMOVED', 'PENDING'), ('PENDING', 'ACTIVE'), ('PENDING', 'REMOVED'), ('ACTIVE', 'REMOVED'))`,
  /** Sequences: per partition gapless (last = rows = max seq), each event in its followee's partition. */
  sequenceViolations: `
    SELECT ((SELECT count(*) FROM event_seq s
              WHERE s.last <> (SELECT count(*) FROM relation_event e WHERE e.part = s.part)
                 OR s.last <> (SELECT coalesce(max(seq), 0) FROM relation_event e WHERE e.part = s.part))
          + (SELECT count(*) FROM relation_event e, ledger_config c WHERE e.part <> ledger_partition(e.followee, c.partitions)))::int AS n`,
} as const;

/** 5. after draining: the projection against the truth (the chapter's Projector.diff). */
export const PROJECTION_DIFF = {
  resurrected: `SELECT count(*)::int AS n FROM proj_follower p
                  LEFT JOIN relation r ON r.follower = p.follower AND r.followee = p.followee
                 WHERE p.state = 'ACTIVE' AND r.state IS DISTINCT FROM 'ACTIVE'`,
  missing: `SELECT count(*)::int AS n FROM relation r
              LEFT JOIN proj_follower p ON p.follower = r.follower AND p.followee = r.followee
             WHERE r.state = 'ACTIVE' AND p.state IS DISTINCT FROM 'ACTIVE'`,
  wrongCounts: `SELECT count(*)::int AS n FROM
                  (SELECT followee, count(*) AS n FROM relation WHERE state = 'ACTIVE' GROUP BY followee) t
                  FULL JOIN proj_count c USING (followee)
                 WHERE coalesce(t.n, 0) <> coalesce(c.n, 0)`,
} as const;

export type RelationAudit = Record<keyof typeof RELATION_INVARIANTS, number>;
export type ProjectionDiff = Record<keyof typeof PROJECTION_DIFF, number>;

async function runAll<K extends string>(pool: Pool, queries: Record<K, string>): Promise<Record<K, number>> {
  // One REPEATABLE READ transaction: all checks see the same snapshot.
  return withTransaction(
    pool,
    async (client) => {
      const out = {} as Record<K, number>;
      for (const key of Object.keys(queries) as K[]) {
        const { rows } = await client.query<{ n: number }>(queries[key]);
        out[key] = Number(rows[0]!.n);
      }
      return out;
    },
    { isolation: "REPEATABLE READ", readOnly: true },
  );
}

export function auditRelations(pool: Pool): Promise<RelationAudit> {
  return runAll(pool, RELATION_INVARIANTS);
}

export function projectionDiff(pool: Pool): Promise<ProjectionDiff> {
  return runAll(pool, PROJECTION_DIFF);
}

export function relationAuditClean(a: RelationAudit): boolean {
  return Object.values(a).every((n) => n === 0);
}

export function formatDiff(d: ProjectionDiff): string {
  return `${d.resurrected},${d.missing},${d.wrongCounts}`;
}
