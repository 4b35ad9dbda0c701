/**
 * Writes the scale bench's population (support/scale-population-sql.ts) into a migrated, initialised ledger
 * database, set-based and in big sorted chunks, leaving every table as live writes followed by a
 * prune would: facts, baselines, projection, counts, notifications; the sequences and watermarks
 * stay at 0 because no event is written outside the blocks (which go through relation_block and
 * are then consumed). Secondary indexes are dropped for the load and built after it; foreign keys
 * and the erasure guards are not checked row by row (session_replication_role = replica): the
 * generated rows satisfy them by construction, and the full audit checks the result.
 */
import type { Pool, PoolClient } from "../src/db/pool.ts";
import { readPartitions } from "../src/db/ledger-config.ts";
import type { Ledger } from "../src/ledger.ts";
import * as sql from "./scale-population-sql.ts";

/** The tables the generator writes, each by one kind of statement; a test may skip one (its negative control). */
export type GeneratedTable =
  | "like_fact"
  | "like_outbox_pruned"
  | "like_count"
  | "relation"
  | "relation_event_pruned"
  | "proj_follower"
  | "proj_count"
  | "notification";

export interface Population {
  likes: number;
  accounts: number;
  items: number;
  follows: number;
  blocks: number;
  /** The item every user likes (accounts/1 likes), and the account every second account follows. */
  hotItem: string;
  hub: string;
}

export interface GenerateOptions {
  likes: number;
  /** Rows per statement (default 1,000,000). */
  chunk?: number;
  skip?: readonly GeneratedTable[];
  onProgress?: (line: string) => void;
}

const LOADED_TABLES = [
  "like_fact",
  "like_outbox_pruned",
  "relation",
  "relation_event_pruned",
  "proj_follower",
  "notification",
];

export function population(likes: number): Population {
  if (!Number.isSafeInteger(likes) || likes < 100)
    throw new Error(`the scale bench needs at least 100 likes, got ${likes}`);
  const accounts = Math.ceil(likes / 10);
  return {
    likes,
    accounts,
    items: accounts,
    follows: accounts,
    blocks: Math.floor(accounts / 100),
    hotItem: "i00000001",
    hub: "a00000001",
  };
}

export const accountId = (n: number) => `a${String(n).padStart(8, "0")}`;
export const itemId = (n: number) => `i${String(n).padStart(8, "0")}`;

async function chunked(
  client: PoolClient,
  text: string,
  first: number,
  end: number,
  chunk: number,
  extra: readonly unknown[],
): Promise<void> {
  for (let from = first; from < end; from += chunk) {
    await client.query(text, [from, Math.min(from + chunk, end), ...extra]);
  }
}

export async function generatePopulation(ledger: Ledger, options: GenerateOptions): Promise<Population> {
  const pop = population(options.likes);
  const chunk = options.chunk ?? 1_000_000;
  const skip = new Set(options.skip ?? []);
  const progress = options.onProgress ?? (() => {});
  const { pool } = ledger;
  const partitions = await readPartitions(pool);
  const stride = Math.max(1, Math.floor((pop.items - 1) / 9));
  const t0 = performance.now();
  const step = async (name: string, work: () => Promise<unknown>) => {
    const s0 = performance.now();
    await work();
    progress(`  ${name}: ${((performance.now() - s0) / 1000).toFixed(1)} s`);
  };

  // Accounts first, then the blocks through the live function (the follows skip blocked pairs).
  await step("accounts, items", async () => {
    await pool.query(sql.INSERT_ACCOUNTS, [1, pop.accounts]);
    await pool.query(sql.INSERT_ITEMS, [1, pop.items]);
  });
  await step("blocks (relation_block)", () => pool.query(sql.APPLY_BLOCKS, [pop.blocks, partitions]));

  const client = await pool.connect();
  try {
    await client.query("SET session_replication_role = replica");
    await client.query("SET synchronous_commit = off");
    await client.query("SET maintenance_work_mem = '512MB'");
    await client.query("SET work_mem = '256MB'");
    const { rows: indexes } = await client.query<{ name: string; def: string }>(sql.SECONDARY_INDEXES, [LOADED_TABLES]);
    for (const index of indexes) await client.query(`DROP INDEX ${index.name}`);
    const likeSteps: [GeneratedTable, string][] = [
      ["like_fact", sql.INSERT_LIKE_FACTS],
      ["like_outbox_pruned", sql.INSERT_LIKE_BASELINES],
    ];
    for (const [table, text] of likeSteps) {
      if (!skip.has(table)) await step(table, () => chunked(client, text, 0, pop.likes, chunk, [pop.items, stride]));
    }
    const followSteps: [GeneratedTable, string][] = [
      ["relation", sql.INSERT_RELATIONS],
      ["relation_event_pruned", sql.INSERT_RELATION_BASELINES],
      ["proj_follower", sql.INSERT_PROJECTION],
      ["notification", sql.INSERT_FOLLOW_NOTIFICATIONS],
    ];
    for (const [table, text] of followSteps) {
      if (!skip.has(table)) await step(table, () => chunked(client, text, 1, pop.follows + 1, chunk, [pop.accounts]));
    }
    if (!skip.has("like_count")) await step("like_count", () => client.query(sql.INSERT_LIKE_COUNTS, [partitions]));
    if (!skip.has("proj_count")) await step("proj_count", () => client.query(sql.INSERT_FOLLOWER_COUNTS));
    await step(`${indexes.length} secondary indexes`, async () => {
      for (const index of indexes) await client.query(index.def);
    });
    await step("vacuum analyze", () =>
      client.query(`VACUUM (ANALYZE) ${["account", "item", "like_count", "proj_count", ...LOADED_TABLES].join(", ")}`),
    );
  } finally {
    await client.query("RESET ALL").catch(() => {});
    client.release();
  }
  // The blocks' events (if any) go through the consumers as live ones would.
  await ledger.projector.drain(2000);
  await ledger.notifications.drain(2000);
  progress(`  generated in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return pop;
}

/** The secondary-index shapes the generator drops and rebuilds, for a caller that checks them. */
export async function secondaryIndexes(pool: Pool): Promise<{ name: string; def: string }[]> {
  return (await pool.query<{ name: string; def: string }>(sql.SECONDARY_INDEXES, [LOADED_TABLES])).rows;
}
