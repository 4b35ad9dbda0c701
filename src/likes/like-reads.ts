import type { Pool } from "../db/pool.ts";
import { validateId } from "../ids.ts";
import { cursorTimeSql, decodeCursor, encodeCursor, validateLimit } from "../pagination.ts";

export interface LikerPage {
  likers: { userId: string; likedAt: Date }[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

/**
 * Who likes an item, newest first, from the facts (exact at once). Keyset-paginated on
 * (changed_at DESC, user_id ASC), the order of the like_fact_likers index: a like that
 * arrives while a client pages lands before its first page, so later pages neither repeat
 * nor skip the older rows.
 */
export async function listLikers(pool: Pool, itemId: string, options: { limit?: number; cursor?: string } = {}): Promise<LikerPage> {
  validateId("itemId", itemId);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ user_id: string; changed_at: Date; at: string }>(
    `SELECT user_id, changed_at, ${cursorTimeSql("changed_at")} AS at FROM like_fact
      WHERE item_id = $1 AND liked
        AND ($2::timestamptz IS NULL OR changed_at < $2::timestamptz OR (changed_at = $2::timestamptz AND user_id > $3::text))
      ORDER BY changed_at DESC, user_id ASC
      LIMIT $4`,
    [itemId, after?.at ?? null, after?.id ?? null, limit + 1],
  );
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    likers: page.map((r) => ({ userId: r.user_id, likedAt: r.changed_at })),
    ...(rows.length > limit && last ? { nextCursor: encodeCursor({ at: last.at, id: last.user_id }) } : {}),
  };
}
