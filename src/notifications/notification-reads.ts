import type { Pool } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { validateId } from "../ids.ts";
import { cursorTimeSql, decodeCursor, keysetPage, validateLimit } from "../pagination.ts";

/** How many of a group's latest accounts a page names (Mastodon's sample_account_ids). */
export const SAMPLE_ACCOUNTS = 8;

/** The form of a notification id (the SQL function notification_id): 16 digits of microseconds, a dash, 12 hex digits. */
export const NOTIFICATION_ID_PATTERN = /^[0-9]{16}-[0-9a-f]{12}$/;

export const NOTIFICATION_TYPES = ["like", "follow", "follow_request", "comment", "reply", "mention"] as const;
export type NotificationType = (typeof NOTIFICATION_TYPES)[number];

export interface NotificationGroup {
  groupKey: string;
  type: NotificationType;
  /** The liked item, the comment, or the mentioning post or comment (a post or comment id); absent for follows and requests. */
  itemId?: string;
  /** The post of itemId (itemId itself for a post); present exactly when itemId is. */
  postId?: string;
  /** Exactly the visible notifications of the group (accounts the reader blocks or is blocked by are not counted). */
  notificationsCount: number;
  /** The latest accounts, newest first, at most SAMPLE_ACCOUNTS. */
  sampleAccountIds: string[];
  mostRecentNotificationId: string;
  oldestNotificationId: string;
  latestNotificationAt: Date;
  oldestNotificationAt: Date;
  /** Newer than the reader's marker. */
  unread: boolean;
}

export interface NotificationGroupPage {
  groups: NotificationGroup[];
  nextCursor?: string;
}

/**
 * The reader's visible notifications, as a CTE named `visible` (parameter $1 is the reader):
 * active rows of the reader, without actors the reader blocks or is blocked by, and without
 * items the reader may not see now (item_state in the truth, asked once per distinct item).
 * Authorization is decided here, at read time, so a block or a visibility change takes effect
 * at once, whatever the consumer's lag.
 */
const VISIBLE_CTE = `
  mine AS (
    SELECT n.* FROM notification n
     WHERE n.recipient = $1 AND n.active
       AND NOT EXISTS (SELECT 1 FROM block b WHERE (b.blocker = $1 AND b.blocked = n.actor) OR (b.blocker = n.actor AND b.blocked = $1))),
  -- MATERIALIZED: else the planner pushes item_state below the DISTINCT and asks it once per row.
  items AS MATERIALIZED (SELECT DISTINCT item_id FROM mine WHERE item_id IS NOT NULL),
  readable AS (SELECT item_id FROM items WHERE item_state($1, item_id, 'TRUTH') = 'VISIBLE'),
  visible AS (SELECT m.* FROM mine m WHERE m.item_id IS NULL OR m.item_id IN (SELECT item_id FROM readable))`;

interface GroupRow {
  group_key: string;
  type: NotificationType;
  item_id: string | null;
  post_id: string | null;
  n: number;
  sample: string[];
  latest_id: string;
  oldest_id: string;
  latest_at: Date;
  oldest_at: Date;
  latest_at_text: string;
  unread: boolean;
}

/**
 * The reader's notifications grouped (docs/notifications.md): groups newest first by their most
 * recent notification id, keyset-paginated on it (the cursor carries that id). Groups are
 * formed from the visible rows only, so a count is exact over what the reader may see.
 */
export async function listNotificationGroups(
  pool: Pool,
  reader: string,
  options: { limit?: number; cursor?: string } = {},
): Promise<NotificationGroupPage> {
  validateId("reader", reader);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  if (after && !NOTIFICATION_ID_PATTERN.test(after.id))
    throw new InvalidInputError("cursor", "is not a cursor this service issued");
  const { rows } = await pool.query<GroupRow>(
    `WITH ${VISIBLE_CTE},
     groups AS (
       SELECT group_key, min(type) AS type, min(item_id) AS item_id, count(*)::int AS n,
              (array_agg(actor ORDER BY id DESC))[1:${SAMPLE_ACCOUNTS}] AS sample,
              max(id) AS latest_id, min(id) AS oldest_id, max(at) AS latest_at, min(at) AS oldest_at
         FROM visible GROUP BY group_key)
     SELECT g.*, ${cursorTimeSql("g.latest_at")} AS latest_at_text,
            CASE WHEN g.item_id IS NOT NULL THEN coalesce((SELECT c.post_id FROM comment c WHERE c.comment_id = g.item_id), g.item_id) END AS post_id,
            g.latest_id > coalesce((SELECT last_read_id FROM notification_marker WHERE recipient = $1), '') AS unread
       FROM groups g
      WHERE $2::text IS NULL OR g.latest_id < $2
      ORDER BY g.latest_id DESC
      LIMIT $3`,
    [reader, after?.id ?? null, limit + 1],
  );
  const { page, nextCursor } = keysetPage(rows, limit, (r) => ({ at: r.latest_at_text, id: r.latest_id }));
  return {
    groups: page.map((r) => ({
      groupKey: r.group_key,
      type: r.type,
      ...(r.item_id === null ? {} : { itemId: r.item_id }),
      ...(r.post_id === null ? {} : { postId: r.post_id }),
      notificationsCount: r.n,
      sampleAccountIds: r.sample,
      mostRecentNotificationId: r.latest_id,
      oldestNotificationId: r.oldest_id,
      latestNotificationAt: r.latest_at,
      oldestNotificationAt: r.oldest_at,
      unread: r.unread,
    })),
    ...(nextCursor ? { nextCursor } : {}),
  };
}

export interface UnreadCount {
  /** Visible notifications newer than the marker. */
  count: number;
  /** Visible groups that hold at least one of them. */
  groups: number;
  lastReadId: string | null;
}

export async function unreadCount(pool: Pool, reader: string): Promise<UnreadCount> {
  validateId("reader", reader);
  const { rows } = await pool.query<{ count: number; groups: number; last_read_id: string | null }>(
    `WITH marker AS (SELECT (SELECT last_read_id FROM notification_marker WHERE recipient = $1) AS last_read_id),
     ${VISIBLE_CTE}
     SELECT count(*)::int AS count, count(DISTINCT v.group_key)::int AS groups, (SELECT last_read_id FROM marker) AS last_read_id
       FROM visible v WHERE v.id > coalesce((SELECT last_read_id FROM marker), '')`,
    [reader],
  );
  const r = rows[0]!;
  return { count: r.count, groups: r.groups, lastReadId: r.last_read_id };
}

/**
 * Moves the reader's marker to `upTo` (a notification id), never backwards and never past the
 * reader's newest notification (a marker in the future would swallow notifications not yet
 * written). Returns the unread count after the move.
 */
export async function markRead(pool: Pool, reader: string, upTo: unknown): Promise<UnreadCount> {
  validateId("reader", reader);
  if (typeof upTo !== "string" || !NOTIFICATION_ID_PATTERN.test(upTo)) {
    throw new InvalidInputError("upTo", "must be a notification id (mostRecentNotificationId of a group)");
  }
  await pool.query(
    `INSERT INTO notification_marker AS m (recipient, last_read_id)
     SELECT $1, least($2::text, newest) FROM (SELECT max(id) AS newest FROM notification WHERE recipient = $1 AND active) x
      WHERE newest IS NOT NULL
     ON CONFLICT (recipient) DO UPDATE SET last_read_id = greatest(m.last_read_id, EXCLUDED.last_read_id), updated_at = now()`,
    [reader, upTo],
  );
  return unreadCount(pool, reader);
}
