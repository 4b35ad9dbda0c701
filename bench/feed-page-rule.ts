/**
 * `node --import tsx bench/feed-page-rule.ts [--accounts 2000] [--reads 600] [--workers 2] [--limit 20]`:
 * the home page's statement with the inbox's read-time rule written out (HOME_PAGE_SQL, as served)
 * against the same statement calling feed_entry_visible per inbox row (the rule's function form),
 * a variant judging each followee once (the reader's ACTIVE followees with their block and
 * projection checks, joined to the inbox), and a primary-key read of a post, interleaved on the
 * same workers (runInterleaved: operation k is of kind k mod 4) so the kinds meet the same load.
 * On the feed bench's generated graph (support/feed-population.ts) with the typical readers'
 * inboxes installed as bench/feed.ts does. First checks that the three forms return the same page
 * for every reader measured. docs/feed.md, "The bench".
 */
import assert from "node:assert/strict";
import path from "node:path";
import { rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { readLivePost } from "../src/content/posts.ts";
import { HOME_PAGE_SQL, INBOX_RULE_SQL } from "../src/feed/feed-reads.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { generateFeedPopulation } from "../support/feed-population.ts";
import { runInterleaved } from "./load.ts";
import { installHomeReaders, type SizeContext } from "./feed.ts";

const { values } = parseArgs({
  options: {
    accounts: { type: "string", default: "2000" },
    reads: { type: "string", default: "600" },
    workers: { type: "string", default: "2" },
    limit: { type: "string", default: "20" },
  },
});
const accounts = Number(values.accounts);
const reads = Number(values.reads);
const workers = Number(values.workers);
const limit = Number(values.limit);

const FUNCTION_FORM = HOME_PAGE_SQL.replace(
  INBOX_RULE_SQL,
  "feed_entry_visible($1, p.author, p.visibility, p.part, p.acl_token, p.deleted_at)",
);
assert.notEqual(FUNCTION_FORM, HOME_PAGE_SQL, "HOME_PAGE_SQL no longer holds INBOX_RULE_SQL");

/**
 * The variant judged per author: the reader's ACTIVE followees, each with its block and projection
 * checks once, joined to the inbox rows (a row of an author not followed finds no judgement). Its
 * cost follows the number of followees, the written-out rule's the rows the page examines.
 */
const PER_AUTHOR_FORM = HOME_PAGE_SQL.replace(
  "FROM feed_inbox i JOIN post p ON p.post_id = i.post_id",
  `FROM feed_inbox i JOIN post p ON p.post_id = i.post_id
      LEFT JOIN (SELECT r.followee AS author,
                        NOT EXISTS (SELECT 1 FROM block b WHERE (b.blocker = $1 AND b.blocked = r.followee)
                                                             OR (b.blocker = r.followee AND b.blocked = $1)) AS unblocked,
                        EXISTS (SELECT 1 FROM proj_follower f WHERE f.followee = r.followee AND f.follower = $1
                                                                AND f.state = 'ACTIVE') AS projected
                   FROM relation r WHERE r.follower = $1 AND r.state = 'ACTIVE') j ON j.author = p.author`,
).replace(
  INBOX_RULE_SQL,
  `p.deleted_at IS NULL AND (p.author = $1 OR (j.author IS NOT NULL AND CASE
     WHEN p.visibility = 'PUBLIC' THEN j.unblocked
     WHEN p.visibility <> 'FOLLOWERS' THEN false
     WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p.part) >= p.acl_token THEN j.projected
     ELSE true END))`,
);

const root = await clusterTempDir("social-ledger-bench-page-rule-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
const pool = createPool({ connectionString: cluster.connectionString("postgres"), max: workers + 1 });
try {
  await migrate(pool);
  await initLedger(pool, { partitions: 16 });
  const pop = await generateFeedPopulation(pool, accounts);
  const ctx: SizeContext = {
    pool,
    pop,
    o: {
      sizes: [accounts],
      reads,
      workers,
      limit,
      partitions: 16,
      streamSeconds: 0,
      postRate: 0,
      followRate: 0,
      loops: 0,
      drainSeconds: 0,
    },
    openPool: () => {
      throw new Error("the page-rule bench runs no phase with pools of its own");
    },
    figures: {},
    values: {},
  };
  const readers = await installHomeReaders(ctx);
  const page = async (sql: string, reader: string) =>
    (await pool.query<{ post_id: string }>(sql, [reader, null, null, limit + 1])).rows.map((r) => r.post_id);
  for (const reader of readers) {
    const served = await page(HOME_PAGE_SQL, reader);
    assert.deepEqual(await page(FUNCTION_FORM, reader), served, `reader ${reader}: function form`);
    assert.deepEqual(await page(PER_AUTHOR_FORM, reader), served, `reader ${reader}: per-author form`);
  }
  const post = (k: number) => `a${String(1 + ((k * 7919) % accounts)).padStart(8, "0")}-p${1 + ((k * 31) % 10)}`;
  const reader = (k: number) => readers[k % readers.length]!;
  const [pk, written, called, perAuthor] = await runInterleaved(reads * 4, workers, [
    (k) => readLivePost(pool, post(k)),
    (k) => pool.query(HOME_PAGE_SQL, [reader(k), null, null, limit + 1]),
    (k) => pool.query(FUNCTION_FORM, [reader(k), null, null, limit + 1]),
    (k) => pool.query(PER_AUTHOR_FORM, [reader(k), null, null, limit + 1]),
  ]);
  const ms = (x: number) => x.toFixed(2);
  process.stdout.write(
    `${accounts} accounts, ${readers.length} typical readers (${ctx.values.typicalInboxRows!.toFixed(0)} inbox rows, ` +
      `${ctx.values.typicalHotFollowees!.toFixed(1)} hot followees on average), ${reads} reads each, ${workers} workers, pages equal\n`,
  );
  for (const [name, f] of [
    ["primary-key read", pk!],
    ["page, rule written out", written!],
    ["page, feed_entry_visible", called!],
    ["page, judged per author", perAuthor!],
  ] as const)
    process.stdout.write(
      `  ${name.padEnd(26)} p50 ${ms(f.p50Ms)} ms  p99 ${ms(f.p99Ms)} ms  p99 / pk p99 ${(f.p99Ms / pk!.p99Ms).toFixed(2)}  errors ${f.errors}\n`,
    );
} finally {
  await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
