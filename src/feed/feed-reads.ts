import type { Pool } from "../db/pool.ts";
import type { Post } from "../content/posts.ts";
import type { Visibility } from "../content/post-types.ts";
import { validateId } from "../ids.ts";
import { cursorTimeSql, decodeCursor, keysetPage, validateLimit } from "../pagination.ts";

export interface TimelineEntry {
  post: Post;
  likes: number;
  comments: number;
  likedByMe: boolean;
}

export interface TimelinePage {
  entries: TimelineEntry[];
  /** Post and relation events not yet applied to the inboxes that could change this page (docs/feed.md, "Lag"). */
  lag: number;
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

/**
 * feed_entry_visible($1, p.author, p.visibility, p.part, p.acl_token, p.deleted_at) written out for
 * the page: calling it starts a SQL function (and post_readable inside it) for every inbox row
 * examined, since a function with sub-selects is never inlined; written out, each check is an
 * index probe of the row's author. Held equal to feed_entry_visible and post_readable on every
 * case of the rule by test/feed/home-page-rule.test.ts.
 */
export const INBOX_RULE_SQL = `p.deleted_at IS NULL
       AND (p.author = $1 OR (
         EXISTS (SELECT 1 FROM relation r WHERE r.follower = $1 AND r.followee = p.author AND r.state = 'ACTIVE')
         AND CASE
               WHEN p.visibility = 'PUBLIC' THEN NOT EXISTS (
                 SELECT 1 FROM block b
                  WHERE (b.blocker = $1 AND b.blocked = p.author) OR (b.blocker = p.author AND b.blocked = $1))
               WHEN p.visibility <> 'FOLLOWERS' THEN false
               WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p.part) >= p.acl_token THEN EXISTS (
                 SELECT 1 FROM proj_follower f WHERE f.followee = p.author AND f.follower = $1 AND f.state = 'ACTIVE')
               ELSE EXISTS (
                 SELECT 1 FROM relation r WHERE r.follower = $1 AND r.followee = p.author AND r.state = 'ACTIVE')
             END))`;

/**
 * A page of a reader's home timeline, newest first, keyset on (at DESC, post_id DESC), ending at
 * the reader's horizon: the union of
 * - the reader's inbox (index feed_inbox_page), each row passing INBOX_RULE_SQL (feed_entry_visible
 *   written out) at read time: what the inbox holds is only a candidate;
 * - the posts of the hot authors the reader follows now (feed_hot_followees), merged at read time
 *   by author_posts_page: one range of post_author_newest per author with the page's LIMIT
 *   inside, judged by the same rule (followed now, and post_readable with the post's token).
 * The union is de-duplicated by post (an inbox row and a merged post are the same (at, post_id):
 * an inbox row's at is its post's created_at). Counts as the count reads give them (the sum of
 * the count rows); liked from the facts. docs/feed.md, "Hot authors".
 */
export const HOME_PAGE_SQL = `
  WITH h AS (SELECT f.horizon_at, f.horizon_id FROM feed_reader f WHERE f.reader = $1),
  inbox AS (
    SELECT i.post_id, i.at
      FROM feed_inbox i JOIN post p ON p.post_id = i.post_id
     WHERE i.reader = $1
       AND ($2::timestamptz IS NULL OR (i.at, i.post_id) < ($2::timestamptz, $3::text))
       AND ${INBOX_RULE_SQL}
     ORDER BY i.at DESC, i.post_id DESC
     LIMIT $4),
  merged AS (
    SELECT m.post_id, m.created_at AS at FROM author_posts_page($1, feed_hot_followees($1), $2, $3, $4::int) m),
  page AS (
    SELECT c.post_id, c.at FROM (SELECT * FROM inbox UNION SELECT * FROM merged) c
     WHERE NOT EXISTS (SELECT 1 FROM h WHERE (c.at, c.post_id) <= (h.horizon_at, h.horizon_id))
     ORDER BY c.at DESC, c.post_id DESC
     LIMIT $4)
  SELECT p.post_id, p.author, p.visibility, p.body, p.part, p.acl_token, p.created_at, ${cursorTimeSql("page.at")} AS cursor_at,
         (SELECT coalesce(sum(n), 0) FROM like_count c WHERE c.item_id = p.post_id)::bigint AS likes,
         (SELECT coalesce(sum(n), 0) FROM comment_count c WHERE c.post_id = p.post_id)::bigint AS comments,
         EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = $1 AND f.item_id = p.post_id AND f.liked) AS liked
    FROM page JOIN post p ON p.post_id = page.post_id
   ORDER BY page.at DESC, page.post_id DESC`;

/**
 * The events that could change a reader's page and are not applied yet: post events by the
 * reader, by an account the reader follows, or of a post in the reader's inbox; relation events
 * of the reader's own follows (a block either way removes the reader's follow with such an event).
 */
export const HOME_LAG_SQL = `
  SELECT (SELECT count(*) FROM post_outbox o JOIN feed_post_watermark w USING (part)
           WHERE o.seq > w.applied_upto
             AND NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq)
             AND (o.author = $1
                  OR EXISTS (SELECT 1 FROM relation r WHERE r.follower = $1 AND r.followee = o.author AND r.state = 'ACTIVE')
                  OR EXISTS (SELECT 1 FROM feed_inbox i WHERE i.reader = $1 AND i.post_id = o.post_id)))::int
       + (SELECT count(*) FROM relation_event o JOIN feed_relation_watermark w USING (part)
           WHERE o.seq > w.applied_upto AND o.follower = $1
             AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq))::int AS lag`;

/**
 * The page and its lag in one statement: a row per entry with the lag beside it, or one row of the
 * lag alone (post_id NULL) when the page is empty.
 */
export const HOME_TIMELINE_SQL = `
  WITH lag AS (${HOME_LAG_SQL}), entries AS (${HOME_PAGE_SQL})
  SELECT lag.lag, entries.* FROM lag LEFT JOIN entries ON true
   ORDER BY entries.created_at DESC, entries.post_id DESC`;

interface PageRow {
  post_id: string;
  author: string;
  visibility: Visibility;
  body: string;
  part: number;
  acl_token: number;
  created_at: Date;
  cursor_at: string;
  likes: number;
  comments: number;
  liked: boolean;
}

/** The caller's home timeline, one page (docs/feed.md). */
export async function readHomeTimeline(
  pool: Pool,
  reader: string,
  options: { limit?: number; cursor?: string } = {},
): Promise<TimelinePage> {
  validateId("reader", reader);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  // One statement, one snapshot: the lag counts exactly the events the page has not seen. Named: parsed and planned once per connection.
  const { rows: joined } = await pool.query<{ lag: number } & Partial<PageRow>>({
    name: "home_timeline",
    text: HOME_TIMELINE_SQL,
    values: [reader, after?.at ?? null, after?.id ?? null, limit + 1],
  });
  const lag = joined[0]!.lag;
  const rows = joined.filter((r): r is { lag: number } & PageRow => r.post_id != null);
  const { page, nextCursor } = keysetPage(rows, limit, (r) => ({ at: r.cursor_at, id: r.post_id }));
  return {
    entries: page.map((r) => ({
      post: {
        postId: r.post_id,
        author: r.author,
        visibility: r.visibility,
        body: r.body,
        part: r.part,
        aclToken: r.acl_token,
        createdAt: r.created_at,
      },
      likes: Number(r.likes),
      comments: Number(r.comments),
      likedByMe: r.liked,
    })),
    lag,
    ...(nextCursor ? { nextCursor } : {}),
  };
}
