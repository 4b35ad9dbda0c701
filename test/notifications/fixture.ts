import type { Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import type { NotificationFeed } from "../../src/notifications/notification-consumer.ts";
import { NOTIFICATION_SOURCES } from "../../src/notifications/notification-sources.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

export interface NotificationFixture {
  db: TestDatabase;
  ledger: Ledger;
  close(): Promise<void>;
}

export async function notificationFixture(
  partitions: number,
  accounts: readonly string[],
  options: { private?: readonly string[] } = {},
): Promise<NotificationFixture> {
  const db = await createTestDatabase({ partitions });
  const ledger = await openLedger(db.pool);
  for (const a of accounts) await ledger.relations.upsertAccount(a, { private: options.private?.includes(a) ?? false });
  return { db, ledger, close: () => db.close() };
}

/** Drains every consumer the service runs. */
export async function drainAll(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
  await ledger.notifications.drain();
  await ledger.feed.drain();
}

/** The view's active rows, in a stable order, as comparable text. */
export async function viewRows(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT concat_ws(' ', source, actor, subject, recipient, type) AS r FROM notification WHERE active ORDER BY 1",
  );
  return rows.map((x) => x.r);
}

/** The same with the ids (which carry time and version): what a rebuild must reproduce exactly. */
export async function viewRowsWithIds(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT concat_ws(' ', source, actor, subject, recipient, type, id, group_key) AS r FROM notification WHERE active ORDER BY 1",
  );
  return rows.map((x) => x.r);
}

/**
 * What the facts say should notify whom, written here independently of the migration's
 * notification_truth view: liked posts and comments (not one's own, not plain items), active
 * and pending follows, live comments on someone else's post, live replies to someone else's
 * comment (when that account is not the post's author: one notification each), live posts and
 * comments mentioning an account recorded in `mention` (when it is neither the writer nor
 * notified of the comment otherwise).
 */
export async function factRows(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    `SELECT r FROM (
       SELECT concat_ws(' ', 'like', f.user_id, f.item_id, p.author, 'like') AS r
         FROM like_fact f JOIN post p ON p.post_id = f.item_id WHERE f.liked AND p.author <> f.user_id
       UNION ALL
       SELECT concat_ws(' ', 'like', f.user_id, f.item_id, c.author, 'like')
         FROM like_fact f JOIN comment c ON c.comment_id = f.item_id WHERE f.liked AND c.author <> f.user_id
       UNION ALL
       SELECT concat_ws(' ', 'relation', r.follower, r.followee, r.followee, CASE WHEN r.state = 'ACTIVE' THEN 'follow' ELSE 'follow_request' END)
         FROM relation r WHERE r.state IN ('ACTIVE', 'PENDING')
       UNION ALL
       SELECT concat_ws(' ', 'comment', c.author, c.comment_id, p.author, 'comment')
         FROM comment c JOIN post p ON p.post_id = c.post_id WHERE c.deleted_at IS NULL AND c.author <> p.author
       UNION ALL
       SELECT concat_ws(' ', 'comment', c.author, c.comment_id, pc.author, 'reply')
         FROM comment c JOIN post p ON p.post_id = c.post_id JOIN comment pc ON pc.comment_id = c.parent_id
        WHERE c.deleted_at IS NULL AND pc.author NOT IN (c.author, p.author)
       UNION ALL
       SELECT concat_ws(' ', 'comment', c.author, c.comment_id, m.account, 'mention')
         FROM comment c JOIN post p ON p.post_id = c.post_id JOIN mention m ON m.item_id = c.comment_id
         LEFT JOIN comment pc ON pc.comment_id = c.parent_id
        WHERE c.deleted_at IS NULL AND m.account NOT IN (c.author, p.author) AND m.account IS DISTINCT FROM pc.author
       UNION ALL
       SELECT concat_ws(' ', 'post', p.author, p.post_id, m.account, 'mention')
         FROM post p JOIN mention m ON m.item_id = p.post_id WHERE p.deleted_at IS NULL AND m.account <> p.author) x
     ORDER BY 1`,
  );
  return rows.map((x) => x.r);
}

/** Every event of every source outbox and partition, delivered again in batches of `size` (newest batch first). */
export async function redeliverEverything(
  feed: NotificationFeed,
  partitions: number,
  size = 7,
): Promise<{ applied: number; skipped: number; dup: number }> {
  const total = { applied: 0, skipped: 0, dup: 0 };
  for (const source of NOTIFICATION_SOURCES) {
    const consumer = feed.consumer(source.name);
    for (let part = 0; part < partitions; part++) {
      const events = await consumer.fetchRange(part, 1, Number.MAX_SAFE_INTEGER);
      const batches = [];
      for (let i = 0; i < events.length; i += size) batches.push(events.slice(i, i + size));
      for (const batch of batches.reverse()) {
        const r = await consumer.applyBatch([...batch, ...batch]);
        total.applied += r.applied;
        total.skipped += r.skipped;
        total.dup += r.dup;
      }
    }
  }
  return total;
}

export async function scalar(pool: Pool, sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(sql, values);
  return Number(rows[0]!.n);
}

/** Moves a like's time (fact and its newest event together, as one transaction's now() writes them). */
export async function backdateLike(pool: Pool, userId: string, itemId: string, at: Date): Promise<void> {
  await pool.query("UPDATE like_fact SET changed_at = $3 WHERE user_id = $1 AND item_id = $2", [userId, itemId, at]);
  await pool.query(
    "UPDATE like_outbox SET created_at = $3 WHERE user_id = $1 AND item_id = $2 AND version = (SELECT version FROM like_fact WHERE user_id = $1 AND item_id = $2)",
    [userId, itemId, at],
  );
}

/** The same for a follow. */
export async function backdateFollow(pool: Pool, follower: string, followee: string, at: Date): Promise<void> {
  await pool.query("UPDATE relation SET changed_at = $3 WHERE follower = $1 AND followee = $2", [
    follower,
    followee,
    at,
  ]);
  await pool.query(
    "UPDATE relation_event SET created_at = $3 WHERE follower = $1 AND followee = $2 AND version = (SELECT version FROM relation WHERE follower = $1 AND followee = $2)",
    [follower, followee, at],
  );
}
