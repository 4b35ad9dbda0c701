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
/** Readers whose inbox the rebuild phase installs. */
const REBUILT_READERS = 50;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const account = (accounts: number, k: number) => `a${String(1 + (k % accounts)).padStart(8, "0")}`;

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

function consumerLoops(ledger: Ledger, loops: number, counted: { rows: number; errors: number }) {
  const parts = Array.from({ length: ledger.partitions }, (_, p) => p);
  let running = true;
  const done = Array.from({ length: loops }, async (_, g) => {
    const group = parts.filter((_, i) => i % loops === g);
    while (running) {
      try {
        const p = await ledger.projector.pollOnce(group, 200);
        const f = await ledger.feed.pollOnce(group, 200);
        counted.rows += f.rows;
        if (p.applied + p.stale + p.dup + f.applied + f.dup === 0) await sleep(5);
      } catch (err) {
        // As a consumer loop does (PartitionWorker): the batch rolled back, the next pass retries it.
        if (counted.errors++ === 0)
          process.stderr.write(`consumer loop: ${err instanceof Error ? err.message : String(err)}\n`);
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

async function feedLag(c: SizeContext): Promise<number> {
  const { rows } = await c.pool.query<{ lag: number }>(
    `SELECT ((SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
           + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part)))::int AS lag`,
  );
  return rows[0]!.lag;
}

async function fanOutUnderLoad(c: SizeContext): Promise<void> {
  const o = c.o;
  const ledger = await openLedger(c.pool);
  const accounts = c.pop.accounts;
  const counted = { rows: 0, errors: 0 };
  const consumers = consumerLoops(ledger, o.loops, counted);
  const posts: string[] = [];
  const freshness: number[] = [];
  const probes: Promise<void>[] = [];
  let unseen = 0;
  const probeErrors: unknown[] = [];
  const probe = async (reader: string, postId: string, committed: number) => {
    const deadline = committed + 120_000;
    while (performance.now() < deadline) {
      const page = await readHomeTimeline(c.pool, reader, { limit: 20 });
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
        const post = await ledger.posts.createPost(author, "PUBLIC", `bench post ${k}`);
        const committed = performance.now();
        posts.push(post.postId);
        // Caught at once: a probe awaited only after the stream must not be an unhandled rejection meanwhile.
        if (rows[0])
          probes.push(
            probe(rows[0].follower, post.postId, committed).catch((err: unknown) => {
              probeErrors.push(err);
            }),
          );
      }),
      paced(o.followRate, o.streamSeconds, async (k) => {
        if (k % 2 === 1 && followed.length > 0) {
          const [a, b] = followed.shift()!;
          await ledger.relations.unfollow(a, b);
          return;
        }
        const a = account(accounts, k * 104729 + 7);
        const b = account(accounts, k * 15485863 + 3);
        if (a === b) return;
        await ledger.relations.follow(a, b);
        followed.push([a, b]);
      }),
    ]);
    const streamSeconds = (performance.now() - t0) / 1000;
    const rowsDuringStream = counted.rows;
    const lagAtEnd = await feedLag(c);
    await Promise.all(probes);
    if (probeErrors.length > 0) throw probeErrors[0];
    while ((await feedLag(c)) > 0) await sleep(50);

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
      consumerErrors: counted.errors,
      freshnessProbes: freshness.length,
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
    `  inbox fan-out           ${f1(v.inboxRowsPerSec)} rows/s over ${f1(v.streamSeconds)} s (${f1(v.postsPerSec)} posts/s, ${f1(v.followChangesPerSec)} follow changes/s achieved; feed lag at the stream's end ${v.feedLagAtStreamEnd} events, ${v.consumerErrors} failed batches retried)`,
    `  writes per post         mean ${f1(v.writesPerPostMean)}  max ${v.writesPerPostMax} inbox rows`,
    `  freshness               p50 ${f1(v.freshnessP50Ms)} ms  p99 ${f1(v.freshnessP99Ms)} ms (${v.freshnessProbes} posts, commit -> follower's first page, polled every ${PROBE_POLL_MS} ms; ${v.freshnessUnseen} never seen)`,
    `  one inbox's rebuild     p50 ${f1(v.rebuildP50Ms)} ms  max ${f1(v.rebuildMaxMs)} ms (${v.rebuiltReaders} readers, ${f1(v.rebuildRowsMean)} rows each)`,
    `  bytes per inbox row     ${f1(v.bytesPerInboxRow)} (feed_inbox with its indexes, ${v.inboxRows} rows)`,
  ];
}
