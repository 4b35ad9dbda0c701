import type { WatermarkTables } from "../counters/watermark.ts";

/** The outboxes notifications are derived from, by retention's kind names. */
export type NotificationSourceName = "likes" | "relations" | "comments" | "posts";

/**
 * One outbox the notification view consumes: its tables (fixed names, never input), how a
 * delivered event is fingerprinted (so a forged or altered copy is refused), and what each
 * event means for the view.
 */
export interface NotificationSource {
  name: NotificationSourceName;
  /** The value of notification.source for rows this outbox writes. */
  rowSource: "like" | "relation" | "comment" | "post";
  outbox: string;
  tables: WatermarkTables;
  /** SQL over the outbox alias `o`: the event's identifying columns as one text. */
  fingerprintSql: string;
  /**
   * SELECT of the candidate rows of the events whose seq is in `fresh(seq)`, partition $1:
   * (source, actor, subject, recipient, type, item_id, active, version, at, part, seq), one row per
   * recipient. An event that notifies no one (a like of a plain item, of one's own post, a comment
   * on one's own post, a post that mentions nobody) yields no row. The same rules as the view
   * notification_truth (src/db/schema.sql).
   */
  candidatesSql: string;
}

/**
 * FROM fragment: the rows of `outbox` (alias `o`) of partition $1 whose seq is in `fresh(seq)`, one
 * primary-key probe per event. As a plain join the planner chose from estimates: with statistics
 * taken while the outbox was small it read the partition's whole outbox once and compared every
 * row with every fresh event (5,700 rows per event at P = 16 in the bench, the notification drain
 * slowing with each round of history); LIMIT 1 keeps the subquery from being flattened into that join.
 */
function freshOutboxRows(outbox: string): string {
  return `fresh CROSS JOIN LATERAL (SELECT * FROM ${outbox} x WHERE x.part = $1 AND x.seq = fresh.seq LIMIT 1) o`;
}

export const LIKE_SOURCE: NotificationSource = {
  name: "likes",
  rowSource: "like",
  outbox: "like_outbox",
  tables: { sequence: "like_seq", seen: "notification_like_seen", watermark: "notification_like_watermark" },
  fingerprintSql: "concat_ws('/', o.user_id, o.item_id, o.delta, o.version)",
  candidatesSql: `
    SELECT 'like'::text AS source, o.user_id AS actor, o.item_id AS subject, a.author AS recipient, 'like'::text AS type,
           o.item_id, o.delta = 1 AS active, o.version, o.created_at AS at, o.part, o.seq
      FROM ${freshOutboxRows("like_outbox")} JOIN notification_item_author a ON a.item_id = o.item_id
     WHERE a.author <> o.user_id`,
};

export const RELATION_SOURCE: NotificationSource = {
  name: "relations",
  rowSource: "relation",
  outbox: "relation_event",
  tables: { sequence: "event_seq", seen: "notification_relation_seen", watermark: "notification_relation_watermark" },
  fingerprintSql: "concat_ws('/', o.follower, o.followee, o.state, o.version)",
  candidatesSql: `
    SELECT 'relation'::text AS source, o.follower AS actor, o.followee AS subject, o.followee AS recipient,
           CASE o.state WHEN 'PENDING' THEN 'follow_request' ELSE 'follow' END AS type,
           NULL::text AS item_id, o.state <> 'REMOVED' AS active, o.version, o.created_at AS at, o.part, o.seq
      FROM ${freshOutboxRows("relation_event")}`,
};

export const COMMENT_SOURCE: NotificationSource = {
  name: "comments",
  rowSource: "comment",
  outbox: "comment_outbox",
  tables: { sequence: "comment_seq", seen: "notification_comment_seen", watermark: "notification_comment_watermark" },
  fingerprintSql: "concat_ws('/', o.comment_id, o.post_id, o.delta, o.version)",
  // Whom a comment notifies, and as what, is the SQL function notification_comment_recipients.
  candidatesSql: `
    SELECT 'comment'::text AS source, c.author AS actor, o.comment_id AS subject, n.recipient, n.type,
           o.comment_id AS item_id, o.delta = 1 AS active, o.version, o.created_at AS at, o.part, o.seq
      FROM ${freshOutboxRows("comment_outbox")}
      JOIN comment c ON c.comment_id = o.comment_id JOIN post p ON p.post_id = o.post_id
     CROSS JOIN LATERAL notification_comment_recipients(c.comment_id, c.author, p.author, c.parent_id) n`,
};

/** Mentions in posts: a post's creation notifies the accounts it mentions, its deletion withdraws them. */
export const POST_SOURCE: NotificationSource = {
  name: "posts",
  rowSource: "post",
  outbox: "post_outbox",
  tables: { sequence: "post_seq", seen: "notification_post_seen", watermark: "notification_post_watermark" },
  fingerprintSql: "concat_ws('/', o.post_id, o.author, o.kind, o.version)",
  candidatesSql: `
    SELECT 'post'::text AS source, o.author AS actor, o.post_id AS subject, m.account AS recipient, 'mention'::text AS type,
           o.post_id AS item_id, o.kind = 'created' AS active, o.version, o.created_at AS at, o.part, o.seq
      FROM ${freshOutboxRows("post_outbox")} JOIN mention m ON m.item_id = o.post_id
     WHERE m.account <> o.author`,
};

export const NOTIFICATION_SOURCES: readonly NotificationSource[] = [
  LIKE_SOURCE,
  RELATION_SOURCE,
  COMMENT_SOURCE,
  POST_SOURCE,
];

/** Columns of a notification row, in the order candidatesSql yields them plus id and group_key. */
export const NOTIFICATION_COLUMNS =
  "source, actor, subject, recipient, type, item_id, active, version, at, id, group_key, part, seq";

/** SQL: the candidates of `rows` (alias) with their id and group key, in NOTIFICATION_COLUMNS order. */
export function withIdAndGroup(rows: string): string {
  return `SELECT ${rows}.source, ${rows}.actor, ${rows}.subject, ${rows}.recipient, ${rows}.type, ${rows}.item_id, ${rows}.active,
                 ${rows}.version, ${rows}.at,
                 notification_id(${rows}.at, ${rows}.source, ${rows}.actor, ${rows}.subject, ${rows}.version) AS id,
                 notification_group_key(${rows}.type, ${rows}.item_id, ${rows}.at,
                   notification_id(${rows}.at, ${rows}.source, ${rows}.actor, ${rows}.subject, ${rows}.version)) AS group_key,
                 ${rows}.part, ${rows}.seq`;
}

/**
 * Serialises the writers of one recipient's rows (consumer batches of every source and
 * partition, rebuild installs): each takes these transaction locks, in ascending key order,
 * before it touches a row. Every row belongs to one recipient, so no two writers ever wait on
 * each other's rows in opposite orders. The two-int advisory key space is not the one-bigint
 * space of the rebuild locks.
 */
export const RECIPIENT_LOCK_SPACE = 21021;
export const LOCK_RECIPIENTS_SQL = `
  SELECT count(*)::int AS n
    FROM (SELECT pg_advisory_xact_lock(${RECIPIENT_LOCK_SPACE}, k.h)
            FROM (SELECT DISTINCT hashtext(r) AS h FROM unnest($1::text[]) AS r ORDER BY 1) k) locked`;

/**
 * SQL boolean over a row alias `k` with (source, actor, subject): the pair has an outbox event the
 * notification view has not processed yet (above its watermark, not in its seen table). A
 * difference between the view and the facts on such a pair is lag; on any other pair it is a lie.
 * The audit and the rebuild's drift report both ask this.
 */
export function pendingEventSql(k: string): string {
  const unseen = (seen: string) =>
    `o.seq > w.applied_upto AND NOT EXISTS (SELECT 1 FROM ${seen} s WHERE s.part = o.part AND s.seq = o.seq)`;
  return `CASE ${k}.source
    WHEN 'like' THEN EXISTS (SELECT 1 FROM like_outbox o JOIN notification_like_watermark w USING (part)
                              WHERE o.user_id = ${k}.actor AND o.item_id = ${k}.subject AND ${unseen("notification_like_seen")})
    WHEN 'relation' THEN EXISTS (SELECT 1 FROM relation_event o JOIN notification_relation_watermark w USING (part)
                                  WHERE o.follower = ${k}.actor AND o.followee = ${k}.subject AND ${unseen("notification_relation_seen")})
    WHEN 'comment' THEN EXISTS (SELECT 1 FROM comment_outbox o JOIN notification_comment_watermark w USING (part)
                                 WHERE o.comment_id = ${k}.subject AND ${unseen("notification_comment_seen")})
    WHEN 'post' THEN EXISTS (SELECT 1 FROM post_outbox o JOIN notification_post_watermark w USING (part)
                              WHERE o.post_id = ${k}.subject AND ${unseen("notification_post_seen")})
    ELSE false END`;
}
