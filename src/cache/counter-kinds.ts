import type { Pool } from "../db/pool.ts";
import { COMMENT_COUNTER } from "../content/comment-spec.ts";
import { readCounter } from "../counters/counter-reads.ts";
import { readCount } from "../likes/like-audit.ts";
import { followerCount } from "../relations/relation-reads.ts";

/** One event of an outbox as the count layer sees it: where it sits, who caused it, what it changes. */
export interface CountEvent {
  part: number;
  seq: number;
  actor: string;
  target: string;
  delta: number;
}

/** The database read with its error bound, as the service answered before the cache existed. */
export interface DatabaseCount {
  count: number;
  lag: number;
  stale: boolean;
  pendingForItem?: number;
  pendingForPost?: number;
}

/**
 * What the Redis count layer needs to know about one counted fact. Each SQL text is one
 * statement, so the figures it returns come from one snapshot:
 *  eventsSql    $1 int[] partitions, $2 bigint[] cursor per partition, $3 limit per partition:
 *               the committed events above each cursor (part, seq, actor, target, delta), in order.
 *  changedSql   $1 int[] partitions, $2 bigint[] low (exclusive), $3 bigint[] high (inclusive):
 *               the distinct targets with an event in that range.
 *  truthSql     $1 text[] targets, $2 bigint[] boundary per partition or NULL (the present): each
 *               target's count over the events <= the boundary (target, n), from the facts minus the
 *               committed events above it, and the boundary used (bound bigint[], by part), all in
 *               one snapshot.
 *  positionsSql every partition's last sequence number (part, last).
 * The outbox sequences are gapless and commit-ordered per partition, so "every event with seq <=
 * bound[part]" is an exact set: the facts of the snapshot minus the events above the bound.
 * Adding a counted fact is one more entry of this shape (comments were).
 */
export interface CounterKind {
  name: string;
  eventsSql: string;
  changedSql: string;
  truthSql: string;
  positionsSql: string;
  readDatabase(pool: Pool, target: string, allowedLag: number): Promise<DatabaseCount>;
}

const changedIn = (table: string, target: string) => `
  SELECT DISTINCT o.${target} AS target
    FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS r(part, lo, hi)
    JOIN ${table} o ON o.part = r.part AND o.seq > r.lo AND o.seq <= r.hi`;

export const LIKE_COUNTS: CounterKind = {
  name: "likes",
  eventsSql: `
    SELECT o.part, o.seq::bigint AS seq, o.user_id AS actor, o.item_id AS target, o.delta::int AS delta
      FROM unnest($1::int[], $2::bigint[]) AS c(part, after)
      CROSS JOIN LATERAL (
        SELECT * FROM like_outbox o WHERE o.part = c.part AND o.seq > c.after ORDER BY o.seq LIMIT $3) o
     ORDER BY o.part, o.seq`,
  changedSql: changedIn("like_outbox", "item_id"),
  truthSql: `
    WITH x AS (SELECT part, least(last, ($2::bigint[])[part + 1]) AS bound FROM like_seq),
         b AS (SELECT array_agg(bound ORDER BY part) AS bound FROM x)
    SELECT t.target,
           ((SELECT count(*) FROM like_fact f WHERE f.item_id = t.target AND f.liked)
            - (SELECT coalesce(sum(o.delta), 0) FROM x JOIN like_outbox o ON o.part = x.part AND o.seq > x.bound
                WHERE o.item_id = t.target))::bigint AS n,
           b.bound
      FROM unnest($1::text[]) AS t(target), b`,
  positionsSql: "SELECT part, last::bigint AS last FROM like_seq ORDER BY part",
  async readDatabase(pool, target, allowedLag) {
    const r = await readCount(pool, target, allowedLag);
    return { count: r.n, lag: r.lag, stale: r.stale, pendingForItem: r.pendingForItem };
  },
};

/**
 * A relation event o's delta: whether it enters or leaves ACTIVE against the pair's previous
 * event, or, when retention pruned that one, the pruned prefix's newest state.
 */
const FOLLOW_DELTA = `((o.state = 'ACTIVE')::int - coalesce((
  SELECT (p.state = 'ACTIVE')::int FROM relation_event p
   WHERE p.follower = o.follower AND p.followee = o.followee AND p.version < o.version
   ORDER BY p.version DESC LIMIT 1), (
  SELECT (b.last_state = 'ACTIVE')::int FROM relation_event_pruned b
   WHERE b.follower = o.follower AND b.followee = o.followee AND b.max_version < o.version), 0))`;

export const FOLLOWER_COUNTS: CounterKind = {
  name: "followers",
  eventsSql: `
    SELECT o.part, o.seq::bigint AS seq, o.follower AS actor, o.followee AS target, ${FOLLOW_DELTA} AS delta
      FROM unnest($1::int[], $2::bigint[]) AS c(part, after)
      CROSS JOIN LATERAL (
        SELECT * FROM relation_event o WHERE o.part = c.part AND o.seq > c.after ORDER BY o.seq LIMIT $3) o
     ORDER BY o.part, o.seq`,
  changedSql: changedIn("relation_event", "followee"),
  truthSql: `
    WITH x AS (SELECT part, least(last, ($2::bigint[])[part + 1]) AS bound FROM event_seq),
         b AS (SELECT array_agg(bound ORDER BY part) AS bound FROM x)
    SELECT t.target,
           ((SELECT count(*) FROM relation r WHERE r.followee = t.target AND r.state = 'ACTIVE')
            - (SELECT coalesce(sum(${FOLLOW_DELTA}), 0) FROM x JOIN relation_event o ON o.part = x.part AND o.seq > x.bound
                WHERE o.followee = t.target))::bigint AS n,
           b.bound
      FROM unnest($1::text[]) AS t(target), b`,
  positionsSql: "SELECT part, last::bigint AS last FROM event_seq ORDER BY part",
  async readDatabase(pool, target, allowedLag) {
    return followerCount(pool, target, allowedLag);
  },
};

/**
 * Comment counts per post. The outbox names the comment, not its author, so the bucket of an
 * increment is chosen by the comment id: it only spreads one post's increments over fields.
 * The truth reads counted_comment, the one definition of a counted comment (docs/comments.md).
 */
export const COMMENT_COUNTS: CounterKind = {
  name: "comments",
  eventsSql: `
    SELECT o.part, o.seq::bigint AS seq, o.comment_id AS actor, o.post_id AS target, o.delta::int AS delta
      FROM unnest($1::int[], $2::bigint[]) AS c(part, after)
      CROSS JOIN LATERAL (
        SELECT * FROM comment_outbox o WHERE o.part = c.part AND o.seq > c.after ORDER BY o.seq LIMIT $3) o
     ORDER BY o.part, o.seq`,
  changedSql: changedIn("comment_outbox", "post_id"),
  truthSql: `
    WITH x AS (SELECT part, least(last, ($2::bigint[])[part + 1]) AS bound FROM comment_seq),
         b AS (SELECT array_agg(bound ORDER BY part) AS bound FROM x)
    SELECT t.target,
           ((SELECT count(*) FROM counted_comment c WHERE c.post_id = t.target)
            - (SELECT coalesce(sum(o.delta), 0) FROM x JOIN comment_outbox o ON o.part = x.part AND o.seq > x.bound
                WHERE o.post_id = t.target))::bigint AS n,
           b.bound
      FROM unnest($1::text[]) AS t(target), b`,
  positionsSql: "SELECT part, last::bigint AS last FROM comment_seq ORDER BY part",
  async readDatabase(pool, target, allowedLag) {
    const r = await readCounter(pool, COMMENT_COUNTER, target, allowedLag);
    return { count: r.n, lag: r.lag, stale: r.stale, pendingForPost: r.pending };
  },
};

export const COUNTER_KINDS: readonly CounterKind[] = [LIKE_COUNTS, FOLLOWER_COUNTS, COMMENT_COUNTS];
