import type { Pool } from "../../src/db/pool.ts";
import type { Hooks } from "../../src/hooks.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { auditFeed, feedAuditClean } from "../../src/feed/feed-audit.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

export interface FeedFixture {
  db: TestDatabase;
  ledger: Ledger;
  close(): Promise<void>;
}

export async function feedFixture(
  partitions: number,
  accounts: readonly string[],
  options: { private?: readonly string[]; maxItems?: number; hotFollowers?: number; hooks?: Hooks } = {},
): Promise<FeedFixture> {
  const db = await createTestDatabase({ partitions });
  const ledger = await openLedger(db.pool, {
    ...(options.maxItems === undefined ? {} : { feedMaxItems: options.maxItems }),
    ...(options.hotFollowers === undefined ? {} : { feedHotFollowers: options.hotFollowers }),
    ...(options.hooks === undefined ? {} : { hooks: options.hooks }),
  });
  for (const a of accounts) await ledger.relations.upsertAccount(a, { private: options.private?.includes(a) ?? false });
  return { db, ledger, close: () => db.close() };
}

/** Drains the follower projector (post_readable's content-token mode reads it) and the feed. */
export async function drainFeed(ledger: Ledger): Promise<void> {
  await ledger.projector.drain();
  await ledger.feed.drain();
}

/** Every inbox as "reader post" lines, in a stable order. */
export async function inboxRows(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT reader || ' ' || post_id AS r FROM feed_inbox ORDER BY reader, post_id",
  );
  return rows.map((x) => x.r);
}

/**
 * What every inbox should hold, written here independently of the migration's feed_truth: each
 * reader's own live posts and the live PUBLIC and FOLLOWERS posts of the accounts it follows
 * (ACTIVE), the newest `max` of them (no horizon: for fixtures that never trim, or compare the top).
 */
export async function expectedRows(pool: Pool, max: number): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    `SELECT reader || ' ' || post_id AS r FROM (
       SELECT x.*, row_number() OVER (PARTITION BY reader ORDER BY at DESC, post_id DESC) AS rn FROM (
         SELECT p.author AS reader, p.post_id, p.created_at AS at FROM post p WHERE p.deleted_at IS NULL
         UNION ALL
         SELECT r.follower, p.post_id, p.created_at FROM relation r JOIN post p ON p.author = r.followee
          WHERE r.state = 'ACTIVE' AND p.deleted_at IS NULL AND p.visibility IN ('PUBLIC', 'FOLLOWERS')) x) y
      WHERE rn <= $1 ORDER BY reader, post_id`,
    [max],
  );
  return rows.map((x) => x.r);
}

export async function feedClean(ledger: Ledger): Promise<boolean> {
  return feedAuditClean(await auditFeed(ledger.pool, ledger.feed.maxItems));
}
