/**
 * The home timeline inbox's phases of bench:feed (bench/feed.ts runs them after the read phases, on
 * the same population). The generated population has no events and empty inboxes; these phases
 * write through the production paths (createPost, follow, unfollow) and apply through the
 * production consumers (FeedConsumers and the follower projector, polling, in this process):
 *   - fan-out under a steady stream: posts at --post-rate (every 20th by a hot author) and follow
 *     changes at --follow-rate for --stream-seconds, with --loops consumer loops; inbox rows written
 *     per second during the stream, and per post the rows it has in the inboxes after the drain
 *     (its fan-out: the author and every follower who may read it), mean and max;
 *   - freshness under that load: for each post by an author with an ACTIVE follower, the time from
 *     createPost's return (committed) until the post is on that follower's first page
 *     (readHomeTimeline, polled every PROBE_POLL_MS, so the figures are that coarse), p50 and p99;
 *   - one inbox's rebuild (FeedRebuild.installReader of an empty inbox of a reader who follows the
 *     20 hot authors), p50 and max, and the rows it installs;
 *   - bytes per inbox row: feed_inbox with its indexes ÷ its rows, after the phases above.
 */
import { FeedRebuild } from "../src/feed/feed-rebuild.ts";
import { readHomeTimeline } from "../src/feed/feed-reads.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { percentile } from "./load.ts";
import type { Phase, SizeContext } from "./feed.ts";

/** How often a freshness probe reads its follower's first page. */
export const PROBE_POLL_MS = 10;
/**
 * Freshness probes in flight at most, each on a connection of its own: a post committed while all
 * are busy is not probed (and counted so). Unbounded, the probes' polls queued for connections
 * and for the CPU ahead of the consumers they wait for, and the stream never caught up.
 */
export const MAX_PROBES = 4;
/** How long a probe polls for its post before counting it never seen. */
const PROBE_TIMEOUT_MS = 120_000;
/** Readers whose inbox the rebuild phase installs. */
const REBUILT_READERS = 50;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const account = (accounts: number, k: number) => `a${String(1 + (k % accounts)).padStart(8, "0")}`;
const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Runs `op(k)` at `rate` per second from t0 for `seconds` (late ticks run at once: the achieved rate is reported). */
async function paced(rate: number, seconds: number, op: (k: number) => Promise<void>): Promise<number> {
  const t0 = performance.now();
  let k = 0;
  while (performance.now() - t0 < seconds * 1000) {
    const due = t0 + (k * 1000) / rate;
    if (due > performance.now()) await sleep(due - performance.now());
    await op(k++);
  }
  return k;
}

interface LoopCounts {
  rows: number;
  errors: number;
  lastError?: string;
}

/**
 * `loops` consumer loops (the follower projector, then the feed's two consumers) over the
 * partitions dealt round-robin, as createWorkers deals them. A failed batch rolled back and the
 * next pass retries it (as PartitionWorker does); each new error message is printed once.
 */
function consumerLoops(ledger: Ledger, loops: number, counted: LoopCounts) {
  const parts = Array.from({ length: ledger.partitions }, (_, p) => p);
  const groups = Array.from({ length: Math.min(loops, parts.length) }, (_, g) =>
    parts.filter((_, i) => i % Math.min(loops, parts.length) === g),
  );
  const printed = new Set<string>();
  let running = true;
  const done = groups.map(async (group) => {
    while (running) {
      try {
        const p = await ledger.projector.pollOnce(group, 200);
        const f = await ledger.feed.pollOnce(group, 200);
        counted.rows += f.rows;
        if (p.applied + p.stale + p.dup + f.applied + f.dup === 0) await sleep(5);
      } catch (err) {
        counted.errors++;
        counted.lastError = message(err);
        if (!printed.has(counted.lastError)) {
          printed.add(counted.lastError);
          process.stderr.write(`consumer loop (partitions ${group.join(",")}): ${counted.lastError}\n`);
        }
        await sleep(50);
      }
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(done);
    },
  };
}

interface Behind {
  source: string;
  part: number;
  last: number;
  applied_upto: number | null;
}

/**
 * The partitions of the feed's two outboxes whose watermark is below their sequence, or that have
 * no watermark row (then no consumer could ever advance them).
 */
const BEHIND_SQL = `
  SELECT 'posts' AS source, s.part, s.last::float8 AS last, w.applied_upto::float8 AS applied_upto
    FROM post_seq s LEFT JOIN feed_post_watermark w USING (part) WHERE w.applied_upto IS DISTINCT FROM s.last
  UNION ALL
  SELECT 'relations', s.part, s.last::float8, w.applied_upto::float8
    FROM event_seq s LEFT JOIN feed_relation_watermark w USING (part) WHERE w.applied_upto IS DISTINCT FROM s.last
  ORDER BY 1, 2`;

async function feedBehind(c: SizeContext): Promise<Behind[]> {
  return (await c.pool.query<Behind>(BEHIND_SQL)).rows;
}

const lagOf = (behind: readonly Behind[]) => behind.reduce((sum, b) => sum + b.last - (b.applied_upto ?? 0), 0);

/**
 * Waits until the consumers have applied every event of both outboxes; past --drain-seconds it
 * fails, naming the partitions behind and the consumers' last error. Returns the seconds it took.
 */
async function drainFeed(c: SizeContext, counted: LoopCounts): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const behind = await feedBehind(c);
    if (behind.length === 0) return (performance.now() - t0) / 1000;
    if (performance.now() - t0 > c.o.drainSeconds * 1000) {
      const where = behind
        .map((b) => `${b.source} partition ${b.part} at ${b.applied_upto ?? "(no watermark row)"} of ${b.last}`)
        .join(", ");
      throw new Error(
        `the feed consumers did not apply the stream's events within --drain-seconds ${c.o.drainSeconds}: ` +
          `${lagOf(behind)} events behind (${where}); ${counted.errors} failed batches` +
          (counted.lastError === undefined ? "" : `, the last: ${counted.lastError}`),
      );
    }
    await sleep(50);
  }
}

async function fanOutUnderLoad(c: SizeContext): Promise<void> {
  const o = c.o;
  const threshold = c.values.hotThreshold;
  if (threshold === undefined) throw new Error("the inbox phases need the home timeline phase's hot authors first");
  // The stream writes on the bench's pool; the consumers and the probes each have their own.
  const writer = await openLedger(c.pool);
  // Judged hot at the threshold the home timeline phase judged the 20 hot authors at: at the
  // default (10,000 followers) the first post of each would cool it, and its cooling merge (its
  // newest 800 posts into every follower's inbox, in one batch) is not the steady fan-out measured.
  const ledger = await openLedger(c.openPool(2 * o.loops + 2, "bench-feed-consumers"), {
    feedHotFollowers: threshold,
  });
  const probePool = c.openPool(MAX_PROBES, "bench-feed-probes");
  const accounts = c.pop.accounts;
  const counted: LoopCounts = { rows: 0, errors: 0 };
  const consumers = consumerLoops(ledger, o.loops, counted);
  const posts: string[] = [];
  const freshness: number[] = [];
  const probes: Promise<void>[] = [];
  let probing = 0;
  let notProbed = 0;
  let unseen = 0;
  const probeErrors: unknown[] = [];
  const probe = async (reader: string, postId: string, committed: number) => {
    const deadline = committed + PROBE_TIMEOUT_MS;
    while (performance.now() < deadline) {
      const page = await readHomeTimeline(probePool, reader, { limit: 20 });
      if (page.entries.some((e) => e.post.postId === postId)) {
        freshness.push(performance.now() - committed);
        return;
      }
      await sleep(PROBE_POLL_MS);
    }
    unseen++;
  };
  const followed: [string, string][] = [];
  try {
    await stream();
  } catch (err) {
    process.stderr.write(`inbox stream failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    throw err;
  } finally {
    await consumers.stop().catch(() => undefined);
  }

  async function stream(): Promise<void> {
    const t0 = performance.now();
    const [postCount, followCount] = await Promise.all([
      paced(o.postRate, o.streamSeconds, async (k) => {
        const author = k % 20 === 0 ? c.pop.hotAuthors[(k / 20) % 20]! : account(accounts, k * 7919 + 13);
        const { rows } = await c.pool.query<{ follower: string }>(
          "SELECT follower FROM relation WHERE followee = $1 AND state = 'ACTIVE' ORDER BY follower LIMIT 1",
          [author],
        );
        const post = await writer.posts.createPost(author, "PUBLIC", `bench post ${k}`);
        const committed = performance.now();
        posts.push(post.postId);
        if (!rows[0]) return;
        if (probing >= MAX_PROBES) {
          notProbed++;
          return;
        }
        probing++;
        // Caught at once: a probe awaited only after the stream must not be an unhandled rejection meanwhile.
        probes.push(
          probe(rows[0].follower, post.postId, committed)
            .catch((err: unknown) => {
              probeErrors.push(err);
            })
            .finally(() => probing--),
        );
      }),
      paced(o.followRate, o.streamSeconds, async (k) => {
        if (k % 2 === 1 && followed.length > 0) {
          const [a, b] = followed.shift()!;
          await writer.relations.unfollow(a, b);
          return;
        }
        const a = account(accounts, k * 104729 + 7);
        const b = account(accounts, k * 15485863 + 3);
        if (a === b) return;
        await writer.relations.follow(a, b);
        followed.push([a, b]);
      }),
    ]);
    const streamSeconds = (performance.now() - t0) / 1000;
    const rowsDuringStream = counted.rows;
    const lagAtEnd = lagOf(await feedBehind(c));
    const drainSeconds = await drainFeed(c, counted);
    await Promise.all(probes);
    if (probeErrors.length > 0) throw probeErrors[0];

    const { rows } = await c.pool.query<{ n: number }>(
      "SELECT count(i.reader)::int AS n FROM unnest($1::text[]) AS p(post_id) LEFT JOIN feed_inbox i USING (post_id) GROUP BY p.post_id",
      [posts],
    );
    const perPost = rows.map((r) => r.n);
    const sorted = Float64Array.from(freshness).sort();
    Object.assign(c.values, {
      streamSeconds,
      postsPerSec: postCount / streamSeconds,
      followChangesPerSec: followCount / streamSeconds,
      inboxRowsPerSec: rowsDuringStream / streamSeconds,
      writesPerPostMean: perPost.reduce((a, b) => a + b, 0) / Math.max(1, perPost.length),
      writesPerPostMax: Math.max(0, ...perPost),
      feedLagAtStreamEnd: lagAtEnd,
      drainSeconds,
      consumerErrors: counted.errors,
      freshnessProbes: freshness.length,
      freshnessNotProbed: notProbed,
      freshnessUnseen: unseen,
      freshnessP50Ms: percentile(sorted, 50),
      freshnessP99Ms: percentile(sorted, 99),
    });
  }
}

async function rebuildInboxes(c: SizeContext): Promise<void> {
  const rebuild = new FeedRebuild(c.pool);
  const readers = c.pop.hotReaders.slice(0, REBUILT_READERS);
  // From an empty inbox: the rebuild installs the newest cap of the reader's truth (and lowers its horizon).
  await c.pool.query("DELETE FROM feed_inbox WHERE reader = ANY ($1)", [readers]);
  const times: number[] = [];
  let added = 0;
  for (const reader of readers) {
    const t0 = performance.now();
    added += (await rebuild.installReader(reader)).added;
    times.push(performance.now() - t0);
  }
  const sorted = Float64Array.from(times).sort();
  Object.assign(c.values, {
    rebuiltReaders: readers.length,
    rebuildP50Ms: percentile(sorted, 50),
    rebuildMaxMs: sorted[sorted.length - 1] ?? Number.NaN,
    rebuildRowsMean: added / Math.max(1, readers.length),
  });
}

async function bytesPerInboxRow(c: SizeContext): Promise<void> {
  await c.pool.query("VACUUM ANALYZE feed_inbox");
  const { rows } = await c.pool.query<{ total: number; n: number }>(
    "SELECT pg_total_relation_size('feed_inbox')::bigint AS total, (SELECT count(*) FROM feed_inbox)::bigint AS n",
  );
  c.values.inboxRows = rows[0]!.n;
  c.values.bytesPerInboxRow = rows[0]!.total / rows[0]!.n;
}

export const INBOX_PHASES: Phase[] = [
  { name: "inbox fan-out and freshness (steady posts and follow changes)", run: fanOutUnderLoad },
  { name: "one inbox's rebuild", run: rebuildInboxes },
  { name: "bytes per inbox row", run: bytesPerInboxRow },
];

const f1 = (x: number | undefined) => (x === undefined ? "?" : x.toFixed(1));

export function inboxReport(v: Record<string, number>): string[] {
  return [
    `  inbox fan-out           ${f1(v.inboxRowsPerSec)} rows/s over ${f1(v.streamSeconds)} s (${f1(v.postsPerSec)} posts/s, ${f1(v.followChangesPerSec)} follow changes/s achieved; feed lag at the stream's end ${v.feedLagAtStreamEnd} events, drained in ${f1(v.drainSeconds)} s; ${v.consumerErrors} failed batches retried)`,
    `  writes per post         mean ${f1(v.writesPerPostMean)}  max ${v.writesPerPostMax} inbox rows`,
    `  freshness               p50 ${f1(v.freshnessP50Ms)} ms  p99 ${f1(v.freshnessP99Ms)} ms (${v.freshnessProbes} posts, commit -> follower's first page, polled every ${PROBE_POLL_MS} ms by at most ${MAX_PROBES} probes, ${v.freshnessNotProbed} posts not probed; ${v.freshnessUnseen} never seen)`,
    `  one inbox's rebuild     p50 ${f1(v.rebuildP50Ms)} ms  max ${f1(v.rebuildMaxMs)} ms (${v.rebuiltReaders} readers, ${f1(v.rebuildRowsMean)} rows each)`,
    `  bytes per inbox row     ${f1(v.bytesPerInboxRow)} (feed_inbox with its indexes, ${v.inboxRows} rows)`,
  ];
}
