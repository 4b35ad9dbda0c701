import type { Pool } from "../db/pool.ts";
import { validateId } from "../ids.ts";
import {
  cursorTimeSql,
  decodeCursor,
  encodeCursor,
  keysetPage,
  validateLimit,
  validateViewer,
  type ListOptions,
} from "../pagination.ts";
import { notBlockedEitherWay } from "../relations/block-filter.ts";

export interface LikerPage {
  likers: { userId: string; likedAt: Date }[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

/**
 * One page of likers. The order mixes directions (time DESC, id ASC), so the cursor cannot be a
 * row comparison; `changed_at <= $2` stands alone at the top of the condition, where it bounds
 * the scan of like_fact_likers, and the OR only sorts out the rows of the cursor's own instant.
 * Written as one OR (`changed_at < $2 OR (changed_at = $2 AND ...)`), the bound was a filter and
 * a page at depth d read d rows (test/likes/likers-page-plan.test.ts).
 */
export const LIKERS_PAGE_SQL = `SELECT user_id, changed_at, ${cursorTimeSql("changed_at")} AS at FROM like_fact
      WHERE item_id = $1 AND liked
        AND ($2::timestamptz IS NULL OR (changed_at <= $2::timestamptz AND (changed_at < $2::timestamptz OR user_id > $3::text)))
        AND ${notBlockedEitherWay("user_id", "$5")}
      ORDER BY changed_at DESC, user_id ASC
      LIMIT $4`;

/**
 * Who likes an item, newest first, from the facts (exact at once). Keyset-paginated on
 * (changed_at DESC, user_id ASC), the order of the like_fact_likers index: a like that
 * arrives while a client pages lands before its first page, so later pages neither repeat
 * nor skip the older rows. A liker in a block with `viewer` (either way) is left out, in the
 * statement, so a page is still `limit` rows whenever that many are left.
 */
export async function listLikers(pool: Pool, itemId: string, options: ListOptions = {}): Promise<LikerPage> {
  validateId("itemId", itemId);
  const limit = validateLimit(options.limit);
  const viewer = validateViewer(options.viewer);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ user_id: string; changed_at: Date; at: string }>(LIKERS_PAGE_SQL, [
    itemId,
    after?.at ?? null,
    after?.id ?? null,
    limit + 1,
    viewer,
  ]);
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    likers: page.map((r) => ({ userId: r.user_id, likedAt: r.changed_at })),
    ...(rows.length > limit && last ? { nextCursor: encodeCursor({ at: last.at, id: last.user_id }) } : {}),
  };
}

export interface LikedItemPage {
  likes: { itemId: string; likedAt: Date }[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

/**
 * The items a user likes, newest like first, from the facts, keyset-paginated on
 * (changed_at DESC, item_id DESC) (index like_fact_liked_list). An item gone for everyone (a
 * deleted post or comment, item_state MISSING) is left out: its like facts stay in the ledger,
 * but no reader sees the item any more (docs/api.md).
 */
export async function listLikedItems(
  pool: Pool,
  userId: string,
  options: { limit?: number; cursor?: string } = {},
): Promise<LikedItemPage> {
  validateId("userId", userId);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ item_id: string; changed_at: Date; at: string }>(
    `SELECT f.item_id, f.changed_at, ${cursorTimeSql("f.changed_at")} AS at FROM like_fact f
      WHERE f.user_id = $1 AND f.liked
        AND ($2::timestamptz IS NULL OR (f.changed_at, f.item_id) < ($2::timestamptz, $3::text))
        AND item_state(NULL, f.item_id, 'TRUTH') <> 'MISSING'
      ORDER BY f.changed_at DESC, f.item_id DESC
      LIMIT $4`,
    [userId, after?.at ?? null, after?.id ?? null, limit + 1],
  );
  const { page, nextCursor } = keysetPage(rows, limit, (r) => ({ at: r.at, id: r.item_id }));
  return {
    likes: page.map((r) => ({ itemId: r.item_id, likedAt: r.changed_at })),
    ...(nextCursor ? { nextCursor } : {}),
  };
}
