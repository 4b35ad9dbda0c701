import type { Pool } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import type { Hooks } from "../hooks.ts";

/** The relation state machine's legal (previous, next) pairs, as the audit checks them. */
export const LEGAL_TRANSITIONS =
  "(('REMOVED', 'ACTIVE'), ('REMOVED', 'PENDING'), ('PENDING', 'ACTIVE'), ('PENDING', 'REMOVED'), ('ACTIVE', 'REMOVED'))";

/**
 * The state a relation event e moves from: the pair's event one version below (alias p), else
 * the pruned prefix's newest state when that prefix ends right below e (alias b), else REMOVED
 * (the v0 placeholder).
 */
export function previousRelationStateSql(e: string, p: string, b: string): string {
  return `coalesce(${p}.state, CASE WHEN ${b}.max_version = ${e}.version - 1 THEN ${b}.last_state END, 'REMOVED')`;
}

/**
 * The chapter's invariants, one SQL statement each, so an operator can paste them into psql.
 * Every query returns the number of violating rows; 0 everywhere means healthy.
 */
export const RELATION_INVARIANTS = {
  /** 1. one row per ordered pair (the primary key), a known state, no self-follow. */
  invalidRows: `SELECT count(*)::int AS n FROM relation WHERE follower = followee OR state NOT IN ('ACTIVE', 'PENDING', 'REMOVED')`,
  /**
   * 2. version = number of events of the pair, and the newest event carries the row's state.
   * Events pruned by retention count through relation_event_pruned (docs/retention.md).
   */
  versionMismatchPairs: `
    SELECT count(*)::int AS n FROM relation r
      LEFT JOIN relation_event_pruned b ON b.follower = r.follower AND b.followee = r.followee
      LEFT JOIN LATERAL (SELECT count(*) AS events, max(version) AS max_version FROM relation_event e
                          WHERE e.follower = r.follower AND e.followee = r.followee) c ON true
      LEFT JOIN relation_event last ON last.follower = r.follower AND last.followee = r.followee AND last.version = r.version
     WHERE r.version <> c.events + coalesce(b.events, 0)
        OR (r.version > 0 AND (coalesce(last.state, CASE WHEN b.max_version = r.version THEN b.last_state END) IS DISTINCT FROM r.state
                               OR greatest(c.max_version, b.max_version) <> r.version))`,
  /** 3. a block in either direction leaves both relation rows REMOVED. */
  blockedButNotRemoved: `
    SELECT count(*)::int AS n FROM block b
      JOIN relation r ON (r.follower = b.blocker AND r.followee = b.blocked) OR (r.follower = b.blocked AND r.followee = b.blocker)
     WHERE r.state <> 'REMOVED'`,
  /**
   * 4 (and the state machine): consecutive versions of a pair only make legal transitions. The
   * previous state of a pair's oldest kept event is the pruned prefix's newest, and the pruned
   * events' own illegal transitions were counted when they were pruned (retention_floor).
   */
  illegalTransitions: `
    SELECT ((SELECT count(*) FROM relation_event e
               LEFT JOIN relation_event p ON p.follower = e.follower AND p.followee = e.followee AND p.version = e.version - 1
               LEFT JOIN relation_event_pruned b ON b.follower = e.follower AND b.followee = e.followee
              WHERE (${previousRelationStateSql("e", "p", "b")}, e.state) NOT IN ${LEGAL_TRANSITIONS})
          + (SELECT coalesce(sum(illegal_transitions), 0) FROM retention_floor WHERE kind = 'relations'))::int AS n`,
  /**
   * Sequences: per partition gapless (last = rows = max seq), each event in its followee's
   * partition; pruned rows count through retention_floor.
   */
  sequenceViolations: `
    SELECT ((SELECT count(*) FROM event_seq s
               LEFT JOIN retention_floor f ON f.kind = 'relations' AND f.part = s.part
              WHERE s.last <> (SELECT count(*) FROM relation_event e WHERE e.part = s.part) + coalesce(f.pruned_events, 0)
                 OR s.last <> greatest((SELECT coalesce(max(seq), 0) FROM relation_event e WHERE e.part = s.part), f.pruned_max_seq))
          + (SELECT count(*) FROM relation_event e, ledger_config c WHERE e.part <> ledger_partition(e.followee, c.partitions))
          + (SELECT coalesce(sum(misplaced_events), 0) FROM retention_floor WHERE kind = 'relations'))::int AS n`,
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

/**
 * The projection against the truth, but only when the projector has caught up, and both read in
 * one snapshot: read apart, a follow committed in between looks like a follower missing from the
 * projection. Null when the projector is behind (lag is no violation). The hook point
 * `audit.beforeProjectionDiff` is between the two reads.
 */
export function projectionDiffWhenCaughtUp(pool: Pool, hooks?: Hooks): Promise<ProjectionDiff | null> {
  return withTransaction(
    pool,
    async (client) => {
      const { rows } = await client.query<{ caught_up: boolean }>(PROJECTION_CAUGHT_UP_SQL);
      if (!rows[0]!.caught_up) return null;
      await hooks?.at("audit.beforeProjectionDiff");
      const diff = {} as ProjectionDiff;
      for (const key of Object.keys(PROJECTION_DIFF) as (keyof ProjectionDiff)[]) {
        diff[key] = (await client.query<{ n: number }>(PROJECTION_DIFF[key])).rows[0]!.n;
      }
      return diff;
    },
    { isolation: "REPEATABLE READ", readOnly: true },
  );
}

/** Whether the follower projection has applied every relation event (every partition's watermark at its sequence). */
export const PROJECTION_CAUGHT_UP_SQL =
  "SELECT coalesce(bool_and(s.last = w.applied_upto), true) AS caught_up FROM event_seq s JOIN proj_watermark w USING (part)";

export function relationAuditClean(a: RelationAudit): boolean {
  return Object.values(a).every((n) => n === 0);
}

export function formatDiff(d: ProjectionDiff): string {
  return `${d.resurrected},${d.missing},${d.wrongCounts}`;
}
