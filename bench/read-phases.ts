/** The read phases: count reads next to their primary-key baseline, HTTP reads, the consumer's drain, comment counts. */
import { COMMENT_COUNTER } from "../src/content/comment-spec.ts";
import { readCounter } from "../src/counters/counter-reads.ts";
import { readCount } from "../src/likes/like-audit.ts";
import { abort, started } from "./lifecycle.ts";
import { runFixedCount, runHttp, runInterleaved, type Figures } from "./load.ts";
import { ITEMS, USERS, item, type Opts } from "./options.ts";
import { OP } from "./ratios.ts";
import { problems, type Row } from "./report.ts";
import type { Target } from "./target.ts";

/** The read baseline: a primary-key SELECT of one row, an ordinary (unnamed) parameterised query. */
function primaryKeyRead(t: Target, k: number): Promise<unknown> {
  return t.pool.query("SELECT item_id, created_at FROM item WHERE item_id = $1", [item(k % ITEMS)]);
}

/**
 * Count reads and primary-key reads alternating on the same workers, so the two kinds meet the
 * same background load. With one worker each call's latency is its own cost plus a round trip,
 * never a queue behind the other workers' calls (with 16 workers on 2 cores every call waits for
 * the CPU, whatever it costs itself).
 */
function interleavedReads(t: Target, o: Opts, workers: number): Promise<Figures[]> {
  return runInterleaved(
    2 * o.reads,
    workers,
    [(k) => readCount(t.pool, item(k % ITEMS), 16), (k) => primaryKeyRead(t, k)],
    abort.signal,
  );
}

export function httpReads(t: Target, o: Opts): Promise<Figures> {
  return runHttp({
    url: t.baseUrl,
    amount: o.reads,
    connections: o.connections,
    onInstance: (i) => (started.cannon = i),
    build: (k) => ({
      method: "GET",
      path: `/v1/items/${item(k % ITEMS)}/like-count?allowedLag=16`,
      authorization: t.auth[k % t.auth.length]!,
    }),
  });
}

export async function readPhase(t: Target, op: string, via: Row["path"], run: () => Promise<Figures>): Promise<Row> {
  const figures = await run();
  const { lag } = await readCount(t.pool, item(0), 0);
  return {
    op,
    path: via,
    partitions: t.partitions,
    figures,
    note: [`lag ${lag}`, ...problems(figures)].join(", "),
    extra: { lag },
  };
}

/** Two rows from one interleaved run: the count read and its primary-key baseline. */
export async function interleavedReadPhase(
  t: Target,
  o: Opts,
  countOp: string,
  baselineOp: string,
  workers = 1,
): Promise<Row[]> {
  const [reads, baseline] = await interleavedReads(t, o, workers);
  const { lag } = await readCount(t.pool, item(0), 0);
  const row = (op: string, figures: Figures): Row => ({
    op,
    path: "library",
    partitions: t.partitions,
    figures,
    note: [`lag ${lag}`, ...problems(figures)].join(", "),
    extra: { lag },
  });
  return [row(countOp, reads!), row(baselineOp, baseline!)];
}

/** Comment creates on one post (each one writes a comment, an item and an outbox event), users spread over partitions. */
export async function commentCreatePhase(t: Target, o: Opts, postId: string): Promise<Row> {
  const figures = await runFixedCount(
    o.ops,
    o.workers,
    (k) => t.ledger.comments.create(`acct${k % USERS}`, postId, `comment ${k}`),
    abort.signal,
  );
  return {
    op: "comment create",
    path: "library",
    partitions: t.partitions,
    figures,
    note: problems(figures).join(", "),
  };
}

/** comment-count reads of that post after its consumer drained: the like-count read's counterpart. */
export async function commentCountReadPhase(t: Target, o: Opts, postId: string): Promise<Row> {
  const stats = await t.ledger.commentConsumer.drain();
  const figures = await runFixedCount(
    o.reads,
    o.workers,
    () => readCounter(t.pool, COMMENT_COUNTER, postId, 16),
    abort.signal,
  );
  const { n, lag } = await readCounter(t.pool, COMMENT_COUNTER, postId, 0);
  return {
    op: "comment-count read (drained)",
    path: "library",
    partitions: t.partitions,
    figures,
    note: [`count ${n}, lag ${lag}, drained ${stats.applied} events`, ...problems(figures)].join(", "),
    extra: { n, lag, ...stats },
  };
}

export async function drainPhase(t: Target): Promise<Row> {
  const backlog = (await readCount(t.pool, item(0), 0)).lag;
  const t0 = performance.now();
  const stats = await t.ledger.likeConsumer.drain();
  const seconds = (performance.now() - t0) / 1000;
  const events = stats.applied + stats.covered + stats.dup;
  return {
    op: OP.drain,
    path: "library",
    partitions: t.partitions,
    figures: { ops: events, seconds, opsPerSec: events / seconds, p50Ms: Number.NaN, p99Ms: Number.NaN, errors: 0 },
    note: `backlog ${backlog}: applied ${stats.applied}, covered ${stats.covered}, dup ${stats.dup}`,
    extra: { backlog, ...stats },
  };
}
