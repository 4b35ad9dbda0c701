/**
 * Deliberately wrong reads and plans, kept only so tests can show that the checks catch them. Never use them.
 */
import type { Pool } from "../../src/db/pool.ts";
import { HOME_PAGE_SQL } from "../../src/feed/feed-reads.ts";

const READ_TIME_RULE = "AND feed_entry_visible($1, p.author, p.visibility, p.part, p.acl_token, p.deleted_at)";

/**
 * The home page as the inbox holds it, without the read-time rule (what Mastodon serves: the
 * insert-time filter only). A post fanned out to a reader just before its author blocked the
 * reader, or merged just before the reader unfollowed, is on the page until the relation event
 * is applied.
 */
export async function inboxPageWithoutReadTimeRule(pool: Pool, reader: string): Promise<string[]> {
  if (!HOME_PAGE_SQL.includes(READ_TIME_RULE)) throw new Error("HOME_PAGE_SQL no longer holds the read-time rule");
  const { rows } = await pool.query<{ post_id: string }>(HOME_PAGE_SQL.replace(READ_TIME_RULE, ""), [
    reader,
    null,
    null,
    201,
  ]);
  return rows.map((r) => r.post_id);
}
