import type { WatermarkTables } from "../counters/watermark.ts";
import type { PoolClient } from "../db/pool.ts";

/** The outboxes the home timeline is kept from, by retention's kind names. */
export type FeedSourceName = "posts" | "relations";

/**
 * One outbox the feed consumes: its tables (fixed names, never input), how a delivered event is
 * fingerprinted (a forged or altered copy is refused), whose posts its events concern, and the
 * plan of what its fresh events mean for the inboxes, read from the facts at apply time.
 */
export interface FeedSource {
  name: FeedSourceName;
  outbox: string;
  tables: WatermarkTables;
  /** SQL over the outbox alias `o`: the event's identifying columns as one text. */
  fingerprintSql: string;
  /** SELECT of the distinct authors of the events with seq = ANY ($2) in partition $1, one column `author`. */
  authorsSql: string;
  /** Whether planSql takes the cap as $3. */
  capped: boolean;
  /**
   * SELECT of the plan of the fresh events (partition $1, seqs $2, the cap $3 when `capped`): rows (op, reader,
   * post_id, author), op 'add' (the row belongs in the inbox now) or 'remove' (it must not be
   * there). Read from the facts in a statement that starts after the authors are locked: that is
   * the whole concurrency argument (docs/feed.md, "Why a late event changes nothing").
   */
  planSql: string;
}

export const POST_SOURCE: FeedSource = {
  name: "posts",
  outbox: "post_outbox",
  tables: { sequence: "post_seq", seen: "feed_post_seen", watermark: "feed_post_watermark" },
  fingerprintSql: "concat_ws('/', o.post_id, o.author, o.kind, o.version)",
  authorsSql: "SELECT DISTINCT o.author FROM post_outbox o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])",
  capped: false,
  // Whatever the event says, the post is reconciled with what it is now: live, to its author and
  // every reader whose truth holds it (feed_truth); deleted, out of every inbox. The truth is read
  // per post in a LATERAL kept whole by OFFSET 0: feed_truth's first branch holds a join, so the
  // planner never pulls it up into the query, and a plain join on post_id cannot reach inside it: it
  // built the whole truth (every follow times every post) for each batch. Inside the LATERAL the
  // post and its author are parameters of both branches: the post by its key, its author's followers by index
  // (test/feed/post-plan-cost.test.ts).
  planSql: `
    WITH ev AS (SELECT DISTINCT o.post_id FROM post_outbox o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])),
    p AS (SELECT p.post_id, p.author, p.created_at, p.deleted_at IS NULL AS live FROM post p JOIN ev USING (post_id))
    SELECT 'add' AS op, t.reader, t.post_id, t.author
      FROM p CROSS JOIN LATERAL (
        SELECT t.reader, t.post_id, t.author FROM feed_truth t WHERE t.post_id = p.post_id AND t.author = p.author OFFSET 0) t
     WHERE p.live
    UNION ALL
    SELECT 'remove', i.reader, i.post_id, i.author FROM p JOIN feed_inbox i ON i.post_id = p.post_id WHERE NOT p.live`,
};

export const RELATION_SOURCE: FeedSource = {
  name: "relations",
  outbox: "relation_event",
  tables: { sequence: "event_seq", seen: "feed_relation_seen", watermark: "feed_relation_watermark" },
  fingerprintSql: "concat_ws('/', o.follower, o.followee, o.state, o.version)",
  authorsSql:
    "SELECT DISTINCT o.followee AS author FROM relation_event o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])",
  capped: true,
  // Whatever the event says, the pair is reconciled with the relation as it is now: ACTIVE, the
  // followee's newest readable posts merge in; anything else (removed, pending, blocked either
  // way, which leaves the relation REMOVED), the followee's posts leave the follower's inbox.
  planSql: `
    WITH pair AS (SELECT DISTINCT o.follower, o.followee FROM relation_event o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])),
    judged AS (
      SELECT pair.*, EXISTS (SELECT 1 FROM relation r WHERE r.follower = pair.follower AND r.followee = pair.followee AND r.state = 'ACTIVE') AS active
        FROM pair)
    SELECT 'add' AS op, j.follower AS reader, t.post_id, t.author
      FROM judged j CROSS JOIN LATERAL (
        SELECT t.post_id, t.author, t.at FROM feed_truth t
         WHERE t.reader = j.follower AND t.author = j.followee ORDER BY t.at DESC, t.post_id DESC LIMIT $3) t
     WHERE j.active
    UNION ALL
    SELECT 'remove', i.reader, i.post_id, i.author
      FROM judged j JOIN feed_inbox i ON i.reader = j.follower AND i.author = j.followee WHERE NOT j.active`,
};

export const FEED_SOURCES: readonly FeedSource[] = [POST_SOURCE, RELATION_SOURCE];

/**
 * Serialises everything the feed does about one author's posts: the fan-out and deletion of its
 * posts (post events) and the merges and removals for its followers (relation events). Taken in
 * ascending key order before the plan is read. The two-int advisory key space is the feed's own.
 */
export const FEED_AUTHOR_LOCK_SPACE = 21032;
export const LOCK_AUTHORS_SQL = `
  SELECT count(*)::int AS n
    FROM (SELECT pg_advisory_xact_lock(${FEED_AUTHOR_LOCK_SPACE}, k.h)
            FROM (SELECT DISTINCT hashtext(a) AS h FROM unnest($1::text[]) AS a ORDER BY 1) k) locked`;

/**
 * Orders every change of the hot set (feed_hot_author) against every install of a reader's truth
 * (the rebuild, a returning reader's read): an install takes it shared before its reader's row and
 * reads the truth after; a post batch whose judgement heated or cooled an author takes it
 * exclusive before it reads the transition's plan, and holds it to its commit. So an install reads
 * the hot set either before a change commits, and committed before that change's plan is read
 * (which then sees the rows it installed), or after (docs/feed.md, "Hot authors"). One key, not
 * the followees' author locks: a reader may follow thousands, and a follow committed between
 * reading the followees and the truth would escape them. The key space is the feed's own.
 */
export const FEED_HOT_SET_LOCK_SPACE = 21033;
export const SHARE_HOT_SET_SQL = `SELECT pg_advisory_xact_lock_shared(${FEED_HOT_SET_LOCK_SPACE}, 0)`;
export const CHANGE_HOT_SET_SQL = `SELECT pg_advisory_xact_lock(${FEED_HOT_SET_LOCK_SPACE}, 0)`;

/**
 * Taken by an install of a reader's truth before the reader's row: orders it with every change of
 * the hot set (SHARE_HOT_SET_SQL). Replaceable only so that a negative control can show the extra
 * row an install (a rebuild, a returning reader's read) leaves when it races a heating without it.
 */
export type HotSetShare = (client: PoolClient) => Promise<void>;

export const shareHotSet: HotSetShare = async (client) => {
  await client.query(SHARE_HOT_SET_SQL);
};

/**
 * Creates and locks the readers' feed_reader rows in reader order (byte-wise), the same for every
 * writer of inboxes (both consumers, the rebuild): the trim of an inbox and its horizon are
 * decided by one writer at a time, and no two writers wait on each other's readers in opposite orders.
 */
export const CREATE_READERS_SQL = `
  INSERT INTO feed_reader (reader)
  SELECT r FROM unnest($1::text[]) AS r ORDER BY r COLLATE "C" ON CONFLICT DO NOTHING`;
export const LOCK_READERS_SQL = `
  SELECT f.reader FROM feed_reader f WHERE f.reader = ANY ($1::text[]) ORDER BY f.reader COLLATE "C" FOR UPDATE`;

/**
 * Applies a plan to the inboxes of locked readers: removes the 'remove' rows, inserts the 'add'
 * rows above their reader's horizon (the post's key read from post: a timestamp never travels
 * through JavaScript, whose Date would round it to the millisecond), then (TRIM_SQL) trims every reader that gained rows to the cap
 * and raises its horizon to the newest key trimmed away. Returns the rows changed.
 */
export const APPLY_PLAN_SQL = `
  WITH plan AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS p(op, reader, post_id, author)),
  removed AS (
    DELETE FROM feed_inbox i USING plan p WHERE p.op = 'remove' AND i.reader = p.reader AND i.post_id = p.post_id RETURNING 1),
  added AS (
    INSERT INTO feed_inbox (reader, post_id, author, at)
    SELECT p.reader, p.post_id, p.author, x.created_at
      FROM plan p JOIN post x ON x.post_id = p.post_id JOIN feed_reader h ON h.reader = p.reader
     WHERE p.op = 'add' AND (h.horizon_at IS NULL OR (x.created_at, p.post_id) > (h.horizon_at, h.horizon_id))
     ORDER BY p.reader, p.post_id
    ON CONFLICT DO NOTHING
    RETURNING reader)
  SELECT (SELECT count(*) FROM removed)::int AS removed, (SELECT count(*) FROM added)::int AS added,
         coalesce((SELECT array_agg(DISTINCT reader) FROM added), '{}') AS grown`;

export const TRIM_SQL = `
  WITH cut AS (
    SELECT r.reader, c.at, c.post_id FROM unnest($1::text[]) AS r(reader)
      CROSS JOIN LATERAL (SELECT i.at, i.post_id FROM feed_inbox i WHERE i.reader = r.reader
                           ORDER BY i.at DESC, i.post_id DESC OFFSET $2 LIMIT 1) c),
  trimmed AS (
    DELETE FROM feed_inbox i USING cut WHERE i.reader = cut.reader AND (i.at, i.post_id) <= (cut.at, cut.post_id) RETURNING 1),
  raised AS (
    UPDATE feed_reader h SET horizon_at = cut.at, horizon_id = cut.post_id FROM cut
     WHERE h.reader = cut.reader AND (h.horizon_at IS NULL OR (cut.at, cut.post_id) > (h.horizon_at, h.horizon_id))
    RETURNING 1)
  SELECT (SELECT count(*) FROM trimmed)::int AS trimmed, (SELECT count(*) FROM raised)::int AS raised`;
