/**
 * `npm run bench:feed`: on an embedded PostgreSQL of its own, generates the feed chapter's graph
 * (support/feed-population.ts: heavy-tailed followers, posts) at each size and measures, in one
 * run per size, each read interleaved with a primary-key read of a post on the same workers:
 *   - an author's page (GET /v1/accounts/{id}/posts's statement) p99 ÷ the primary-key read's p99;
 *   - the hot-author merge (author_posts_page over the 20 hot authors a reader follows) p99 ÷ the same;
 *   - bytes per post row (the post table with its indexes and TOAST);
 *   - the fan-out write cost per inbox row and the merge's cost per extra author, from which the
 *     hot-follower threshold's crossover is computed (docs/feed.md, "Cost model and the threshold");
 *   - the home timeline (GET /v1/timelines/home's statement: the lag and the page merging the inbox
 *     with the hot authors the reader follows) p99 ÷ the same, for typical readers and for readers
 *     following the 20 hot authors.
 *   - the inbox (bench/feed-inbox.ts): inbox rows written per second and writes per post under a
 *     steady stream of posts and follow changes, freshness (commit -> a follower's first page) under
 *     that load, one inbox's rebuild, bytes per inbox row.
 *
 *   node --import tsx bench/feed.ts [--accounts N] [--reads 2000] [--workers 4] [--limit 20] [--partitions 16]
 *     [--stream-seconds 30] [--post-rate 20] [--follow-rate 10] [--loops 2] [--drain-seconds 300] [--help]
 *
 * Without --accounts it runs 10,000 and 100,000 accounts. Results go to .tmp/bench-results/feed-<time>.json.
 * The phases are a list (PHASES), each reading and writing the same SizeContext.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { readAuthorPosts } from "../src/content/author-posts.ts";
import { readLivePost } from "../src/content/posts.ts";
import { readHomeTimeline } from "../src/feed/feed-reads.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { runInterleaved, type Figures } from "./load.ts";
import { generateFeedPopulation, type FeedPopulation } from "../support/feed-population.ts";
import { INBOX_PHASES, inboxReport } from "./feed-inbox.ts";

/** How long a bench pool waits for a connection (the pool's default, 5 s, fails a run on a loaded machine). */
const CONNECT_TIMEOUT_MS = 120_000;

const RESULTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", ".tmp", "bench-results");

interface FeedOptions {
  sizes: number[];
  reads: number;
  workers: number;
  limit: number;
  partitions: number;
  /** The inbox phases' steady stream: its length, posts and follow changes per second, consumer loops. */
  streamSeconds: number;
  postRate: number;
  followRate: number;
  loops: number;
  /** How long the consumers may take to apply every event after the stream before the run fails. */
  drainSeconds: number;
}

const USAGE = `npm run bench:feed -- [options]   (bench/README.md, "bench:feed")
  --accounts N          one size (at least 1000); default: 10000, then 100000
  --reads N             reads per read phase (default 2000)
  --workers N           concurrent readers of the read phases (default 4)
  --limit N             page size (default 20)
  --partitions N        ledger partitions (default 16)
  --stream-seconds N    the inbox phase's steady stream of posts and follow changes (default 30)
  --post-rate N         posts per second in the stream (default 20; every 20th by a hot author)
  --follow-rate N       follow changes per second in the stream (default 10)
  --loops N             consumer loops applying the stream, partitions dealt round-robin (default 2)
  --drain-seconds N     the bound on applying every event after the stream; past it the run fails
                        naming the partitions behind (default 300)
`;

/** What one size's phases share: the database, the population, and the figures written so far. */
export interface SizeContext {
  pool: Pool;
  /** Another pool on the same database, ended with the size's run: for a phase's own connections. */
  openPool(max: number, applicationName: string): Pool;
  pop: FeedPopulation;
  o: FeedOptions;
  figures: Record<string, Figures>;
  values: Record<string, number>;
}

export interface Phase {
  name: string;
  run(ctx: SizeContext): Promise<void>;
}

/** A row for the results file: every figure but the latencies. */
const strip = (f: Figures): Figures => ({ ...f, latencyMs: undefined });

/** Post ids of the generated population (a00000001-p1 ..): a deterministic spread over accounts and ages. */
const somePost = (pop: FeedPopulation, k: number) =>
  `a${String(1 + ((k * 7919) % pop.accounts)).padStart(8, "0")}-p${1 + ((k * 31) % 10)}`;
const someAccount = (pop: FeedPopulation, k: number) =>
  `a${String(1 + ((k * 104729) % pop.accounts)).padStart(8, "0")}`;

/**
 * The generated graph has no inboxes: the 20 hot accounts are judged hot by the production
 * function at the threshold of the least followed of them, and the measured readers' inboxes are
 * installed from the facts (feed_install_reader, the rebuild's function, cap 800). Returns the
 * typical readers (up to 200 accounts that do not follow all 20 hot authors).
 */
export async function installHomeReaders(c: SizeContext): Promise<string[]> {
  const { rows: least } = await c.pool.query<{ n: number }>(
    "SELECT min(n)::int AS n FROM proj_count WHERE followee = ANY ($1::text[])",
    [c.pop.hotAuthors],
  );
  c.values.hotThreshold = least[0]!.n;
  await c.pool.query("SELECT * FROM feed_judge_hot_authors($1::text[], $2::int)", [c.pop.hotAuthors, least[0]!.n]);
  const hotReaders = new Set(c.pop.hotReaders);
  const typical = [...new Set(Array.from({ length: 200 }, (_, k) => someAccount(c.pop, k + 7)))].filter(
    (a) => !hotReaders.has(a),
  );
  for (const reader of [...typical, ...c.pop.hotReaders]) {
    await c.pool.query("INSERT INTO feed_reader (reader) VALUES ($1) ON CONFLICT DO NOTHING", [reader]);
    await c.pool.query("SELECT * FROM feed_install_reader($1, 800)", [reader]);
  }
  const { rows: shape } = await c.pool.query<{ inbox: number; hot: number }>(
    `SELECT avg((SELECT count(*) FROM feed_inbox i WHERE i.reader = r))::float8 AS inbox,
            avg(cardinality(feed_hot_followees(r)))::float8 AS hot
       FROM unnest($1::text[]) r`,
    [typical],
  );
  c.values.typicalReaders = typical.length;
  c.values.typicalInboxRows = shape[0]!.inbox;
  c.values.typicalHotFollowees = shape[0]!.hot;
  return typical;
}

/**
 * Each read phase runs interleaved with a primary-key read of a post (runInterleaved: operation k
 * is the page for odd k, the primary-key read for even k, on the same workers), so each ratio's
 * two sides meet the same load: this machine's p99s are mostly scheduling stalls, and two
 * separate runs compared two moments of it (docs/decisions/0042-feed-reads-beside-the-primary-key.md).
 */
async function besidePk(c: SizeContext, name: string, page: (k: number) => Promise<unknown>): Promise<void> {
  const [pk, measured] = await runInterleaved(2 * c.o.reads, c.o.workers, [
    (k) => readLivePost(c.pool, somePost(c.pop, k)),
    page,
  ]);
  c.figures[`${name}Pk`] = pk!;
  c.figures[name] = measured!;
}

/**
 * The phases, in order. The inbox's phases come last: they write posts, follows and inbox rows
 * the read phases must not see.
 */
export const PHASES: Phase[] = [
  {
    name: "author page",
    run: (c) =>
      besidePk(c, "authorPage", (k) =>
        readAuthorPosts(c.pool, someAccount(c.pop, k + 1), [someAccount(c.pop, k)], { limit: c.o.limit }),
      ),
  },
  {
    name: "hot author's page",
    run: (c) =>
      besidePk(c, "hotAuthorPage", (k) =>
        readAuthorPosts(c.pool, c.pop.hotReaders[k % c.pop.hotReaders.length]!, [c.pop.hotAuthors[k % 20]!], {
          limit: c.o.limit,
        }),
      ),
  },
  {
    name: "hot-author merge (20 authors)",
    run: (c) =>
      besidePk(c, "hotMerge", (k) =>
        readAuthorPosts(c.pool, c.pop.hotReaders[k % c.pop.hotReaders.length]!, c.pop.hotAuthors, {
          limit: c.o.limit,
        }),
      ),
  },
  {
    name: "home timeline (typical readers, readers of the 20 hot authors)",
    run: async (c) => {
      const typical = await installHomeReaders(c);
      await besidePk(c, "homeTypical", (k) =>
        readHomeTimeline(c.pool, typical[k % typical.length]!, { limit: c.o.limit }),
      );
      await besidePk(c, "homeHotReader", (k) =>
        readHomeTimeline(c.pool, c.pop.hotReaders[k % c.pop.hotReaders.length]!, { limit: c.o.limit }),
      );
    },
  },
  {
    name: "fan-out write cost (inbox-shaped rows)",
    // One post of the most followed account written to each ACTIVE follower's row of a table
    // shaped as an inbox (reader, time, post), set-based: the floor of a fan-out's cost per row.
    run: async (c) => {
      await c.pool.query(
        "CREATE TABLE bench_inbox (reader text NOT NULL, created_at timestamptz NOT NULL, post_id text NOT NULL, PRIMARY KEY (reader, created_at, post_id))",
      );
      try {
        let rows = 0;
        const t0 = performance.now();
        for (let i = 0; i < 3; i++) {
          const r = await c.pool.query(
            "INSERT INTO bench_inbox SELECT follower, now(), $2 FROM proj_follower WHERE followee = $1 AND state = 'ACTIVE'",
            [c.pop.hotAuthors[0], `bench-post-${i}`],
          );
          rows += r.rowCount ?? 0;
        }
        c.values.fanoutUsPerRow = (1000 * (performance.now() - t0)) / rows;
        c.values.fanoutRows = rows;
      } finally {
        await c.pool.query("DROP TABLE bench_inbox");
      }
    },
  },
  {
    name: "bytes per post",
    run: async (c) => {
      const { rows } = await c.pool.query<{ total: number; index: number; n: number }>(
        `SELECT pg_total_relation_size('post')::bigint AS total, pg_relation_size('post_author_newest')::bigint AS index,
                (SELECT count(*) FROM post)::bigint AS n`,
      );
      c.values.bytesPerPost = rows[0]!.total / rows[0]!.n;
      c.values.indexBytesPerPost = rows[0]!.index / rows[0]!.n;
    },
  },
  ...INBOX_PHASES,
];

function parseOptions(argv: readonly string[]): FeedOptions {
  const { values: v } = parseArgs({
    args: [...argv],
    options: {
      accounts: { type: "string" },
      reads: { type: "string" },
      workers: { type: "string" },
      limit: { type: "string" },
      partitions: { type: "string" },
      "stream-seconds": { type: "string" },
      "post-rate": { type: "string" },
      "follow-rate": { type: "string" },
      loops: { type: "string" },
      "drain-seconds": { type: "string" },
      help: { type: "boolean" },
    },
  });
  if (v.help) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  const positive = (name: string, raw: string | undefined, fallback: number) => {
    const n = raw === undefined ? fallback : Number(raw);
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${raw}`);
    return n;
  };
  return {
    sizes: v.accounts === undefined ? [10_000, 100_000] : [positive("accounts", v.accounts, 0)],
    reads: positive("reads", v.reads, 2000),
    workers: positive("workers", v.workers, 4),
    limit: positive("limit", v.limit, 20),
    partitions: positive("partitions", v.partitions, 16),
    streamSeconds: positive("stream-seconds", v["stream-seconds"], 30),
    postRate: positive("post-rate", v["post-rate"], 20),
    followRate: positive("follow-rate", v["follow-rate"], 10),
    loops: positive("loops", v.loops, 2),
    drainSeconds: positive("drain-seconds", v["drain-seconds"], 300),
  };
}

const ms = (x: number) => x.toFixed(2);

/** A page's line: its p50 and p99, and its p99 ÷ the p99 of the primary-key reads interleaved with it. */
function pageLine(c: SizeContext, label: string, name: string, goal: string): string {
  const f = c.figures[name]!;
  const pk = c.figures[`${name}Pk`]!;
  return `  ${label.padEnd(28)} p50 ${ms(f.p50Ms)} ms  p99 ${ms(f.p99Ms)} ms  beside pk p50 ${ms(pk.p50Ms)} p99 ${ms(pk.p99Ms)} ms: p99 / pk p99 ${ratio(c, name).toFixed(2)}${goal}`;
}

const ratio = (c: SizeContext, name: string) => c.figures[name]!.p99Ms / c.figures[`${name}Pk`]!.p99Ms;

function report(c: SizeContext, generateSeconds: number): Record<string, unknown> {
  const perExtraAuthorMs = (c.figures.hotMerge!.p50Ms - c.figures.hotAuthorPage!.p50Ms) / 19;
  // Cost model (docs/feed.md): a post's fan-out to F followers costs F x w and must
  // finish within the freshness budget B (1 s) on one consumer; above F* = B / w it is merged at read time.
  const crossover = 1_000_000 / c.values.fanoutUsPerRow!;
  const pages = ["authorPage", "hotAuthorPage", "hotMerge", "homeTypical", "homeHotReader"];
  const lines = [
    `accounts ${c.pop.accounts}: ${c.pop.follows} follows, ${c.pop.posts} posts, largest ${c.pop.largestFollowers} followers, ${c.pop.accountsOver10k} accounts >= 10,000 (generated in ${generateSeconds.toFixed(0)} s)`,
    pageLine(c, `author page (${c.o.limit})`, "authorPage", " (goal <= 3)"),
    pageLine(c, "hot author's page", "hotAuthorPage", ""),
    pageLine(c, "hot merge, 20 authors", "hotMerge", " (goal <= 3)"),
    `  merge cost per extra author (p50) ${ms(perExtraAuthorMs)} ms`,
    pageLine(
      c,
      "home page, typical reader",
      "homeTypical",
      ` (goal <= 3; ${c.values.typicalReaders} readers, ${c.values.typicalInboxRows!.toFixed(0)} inbox rows and ${c.values.typicalHotFollowees!.toFixed(1)} hot followees on average)`,
    ),
    pageLine(
      c,
      "home page, 20 hot followees",
      "homeHotReader",
      ` (goal <= 3; hot from ${c.values.hotThreshold} followers)`,
    ),
    `  fan-out write ${c.values.fanoutUsPerRow!.toFixed(1)} µs per inbox row (${c.values.fanoutRows} rows) -> crossover F* = 1 s / w = ${Math.round(crossover)} followers`,
    `  bytes per post row ${c.values.bytesPerPost!.toFixed(0)} (post_author_newest ${c.values.indexBytesPerPost!.toFixed(0)})`,
    ...inboxReport(c.values),
  ];
  process.stdout.write(lines.join("\n") + "\n");
  return {
    accounts: c.pop.accounts,
    population: { ...c.pop, hotReaders: c.pop.hotReaders.length },
    generateSeconds,
    figures: Object.fromEntries(Object.entries(c.figures).map(([k, f]) => [k, strip(f)])),
    ratios: Object.fromEntries(pages.map((name) => [name, ratio(c, name)])),
    values: { ...c.values, perExtraAuthorMs, crossoverFollowers: crossover },
  };
}

async function measureSize(
  cluster: EmbeddedCluster,
  accounts: number,
  o: FeedOptions,
): Promise<Record<string, unknown>> {
  const database = `bench_feed_${accounts}`;
  // A loaded machine answers a connection slowly: the bench waits for one rather than failing at the pool's default 5 s.
  const admin = createPool({
    connectionString: cluster.connectionString("postgres"),
    max: 1,
    connectionTimeoutMs: CONNECT_TIMEOUT_MS,
  });
  await admin.query(`DROP DATABASE IF EXISTS ${database}`);
  await admin.query(`CREATE DATABASE ${database}`);
  // Room for the read workers, or for the inbox stream's two writers (the consumer loops and the
  // freshness probes have pools of their own, so neither waits behind the other for a connection).
  const pool = createPool({
    connectionString: cluster.connectionString(database),
    max: o.workers + 2,
    connectionTimeoutMs: CONNECT_TIMEOUT_MS,
  });
  const phasePools: Pool[] = [];
  const openPool = (max: number, applicationName: string) => {
    const opened = createPool({
      connectionString: cluster.connectionString(database),
      max,
      applicationName,
      connectionTimeoutMs: CONNECT_TIMEOUT_MS,
    });
    phasePools.push(opened);
    return opened;
  };
  try {
    await migrate(pool);
    await initLedger(pool, { partitions: o.partitions });
    process.stdout.write(`generating ${accounts} accounts ...\n`);
    const g0 = performance.now();
    const pop = await generateFeedPopulation(pool, accounts, (line) => process.stdout.write(line + "\n"));
    const generateSeconds = (performance.now() - g0) / 1000;
    const ctx: SizeContext = { pool, openPool, pop, o, figures: {}, values: {} };
    for (const phase of PHASES) {
      process.stdout.write(`  ${phase.name} ...\n`);
      await phase.run(ctx);
    }
    return report(ctx, generateSeconds);
  } finally {
    for (const opened of phasePools) await opened.end();
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${database}`);
    await admin.end();
  }
}

async function runFeed(o: FeedOptions): Promise<void> {
  const root = await clusterTempDir("social-ledger-bench-feed-");
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
  try {
    const runs = [];
    for (const accounts of o.sizes) runs.push(await measureSize(cluster, accounts, o));
    await mkdir(RESULTS_DIR, { recursive: true });
    const file = path.join(RESULTS_DIR, `feed-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
    await writeFile(file, JSON.stringify({ options: o, runs }, null, 2));
    process.stdout.write(`results: ${path.relative(process.cwd(), file)}\n`);
  } finally {
    await cluster.stop();
    await rm(root, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await runFeed(parseOptions(process.argv.slice(2)));
