/**
 * Writes the feed bench's population (support/feed-population-sql.ts) into a migrated,
 * initialised ledger database, set-based in chunks of accounts, with the secondary indexes of the
 * loaded tables dropped for the load and built after it, and foreign keys and the erasure guards
 * not checked row by row (session_replication_role = replica): the rows satisfy them by construction.
 */
import type { Pool } from "../src/db/pool.ts";
import { readPartitions } from "../src/db/ledger-config.ts";
import { SECONDARY_INDEXES } from "./scale-population-sql.ts";
import * as sql from "./feed-population-sql.ts";

export interface FeedPopulation {
  accounts: number;
  follows: number;
  posts: number;
  /** a1..a20, the most followed first. */
  hotAuthors: string[];
  /** Accounts that follow every hot author. */
  hotReaders: string[];
  /** Followers of the most followed account, and how many accounts have 10,000 or more. */
  largestFollowers: number;
  accountsOver10k: number;
}

const LOADED_TABLES = ["relation", "proj_follower", "item", "post"];

export async function generateFeedPopulation(
  pool: Pool,
  accounts: number,
  progress: (line: string) => void = () => {},
): Promise<FeedPopulation> {
  if (!Number.isSafeInteger(accounts) || accounts < 1000)
    throw new Error(`the feed bench needs at least 1000 accounts, got ${accounts}`);
  const partitions = await readPartitions(pool);
  const chunk = Math.max(1000, Math.floor(2_000_000 / (sql.FOLLOWS_PER_ACCOUNT + sql.HOT_AUTHORS)));
  const client = await pool.connect();
  const step = async (name: string, work: () => Promise<unknown>) => {
    const t0 = performance.now();
    await work();
    progress(`  ${name}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  };
  try {
    await client.query("SET session_replication_role = replica");
    await client.query("SET synchronous_commit = off");
    await client.query("SET maintenance_work_mem = '512MB'");
    await client.query("SET work_mem = '256MB'");
    const { rows: indexes } = await client.query<{ name: string; def: string }>(SECONDARY_INDEXES, [LOADED_TABLES]);
    for (const index of indexes) await client.query(`DROP INDEX ${index.name}`);
    await step("accounts", () => client.query(sql.INSERT_ACCOUNTS, [accounts]));
    const chunked = async (text: string, size: number, extra: unknown[]) => {
      for (let from = 1; from <= accounts; from += size)
        await client.query(text, [from, Math.min(from + size, accounts + 1), ...extra]);
    };
    await step("relation", () => chunked(sql.INSERT_RELATIONS, chunk, [accounts]));
    await step("proj_follower", () => client.query(sql.INSERT_PROJECTION));
    await step("proj_count", () => client.query(sql.INSERT_FOLLOWER_COUNTS));
    await step("items of posts", () => chunked(sql.INSERT_POST_ITEMS, 100_000, [partitions]));
    await step("posts", () => chunked(sql.INSERT_POSTS, 100_000, [partitions]));
    await step(`${indexes.length} secondary indexes`, async () => {
      for (const index of indexes) await client.query(index.def);
    });
    await step("vacuum analyze", () =>
      client.query(`VACUUM (ANALYZE) account, proj_count, ${LOADED_TABLES.join(", ")}`),
    );
  } finally {
    await client.query("RESET ALL").catch(() => {});
    client.release();
  }
  const { rows } = await pool.query<{ follows: number; posts: number; largest: number; over: number }>(
    `SELECT (SELECT count(*) FROM relation)::int AS follows, (SELECT count(*) FROM post)::int AS posts,
            (SELECT max(n) FROM proj_count)::int AS largest, (SELECT count(*) FROM proj_count WHERE n >= 10000)::int AS over`,
  );
  const r = rows[0]!;
  return {
    accounts,
    follows: r.follows,
    posts: r.posts,
    hotAuthors: Array.from({ length: sql.HOT_AUTHORS }, (_, i) => sql.accountId(i + 1)),
    hotReaders: Array.from({ length: sql.HOT_READERS }, (_, i) => sql.accountId(accounts - i)),
    largestFollowers: r.largest,
    accountsOver10k: r.over,
  };
}
