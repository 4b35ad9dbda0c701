/**
 * The concurrency sweep of `npm run bench`: the write path under the concurrency a service sees.
 * On databases of their own (P = 1 and the default P, a pool of 20 as `serve` has, the consumer
 * loops running in the process as `serve` runs them): like/unlike and follow/unfollow at 16, 64,
 * 256 and 1024 callers, through the library (likes.like/unlike, relations.follow/unfollow) and
 * over HTTP (as many keep-alive connections), next to pgbench's single-row INSERT at 16, 64 and
 * 128 clients (16 and 64 with --quick); each level's kinds in alternating chunks, so the ratios compare the same minutes.
 * Per row: CHANGED/s, p50, p99, the consumers' lag (largest and last sample while writing) and
 * the main thread's CPU per operation (the HTTP server's per request). Per P: the like
 * consumer's drain of a backlog, and count reads next to a primary-key read in the same pool.
 * The ratios are the goals of the write path under concurrency (docs/decisions/0026-http-under-concurrency.md).
 */
import { numericDefault } from "../src/config.ts";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { createWorkers } from "../src/ledger.ts";
import { abort, checkAbort, started } from "./lifecycle.ts";
import { runFixedCount, runForSeconds, runHttp, type Figures, type HttpRequestSpec } from "./load.ts";
import { ITEMS, item, type Opts } from "./options.ts";
import { pgbenchInsertKind } from "./pgbench.ts";
import { interleavedReadPhase } from "./read-phases.ts";
import { progress, type Row } from "./report.ts";
import { openTarget, type Target } from "./target.ts";
import { alternatingWrites, relationEventsWritten, type Chunk, type WriteKind } from "./write-phases.ts";

export interface SweepShape {
  callers: readonly number[];
  /** pgbench clients measured next to a caller level (the level's own count, at most 128). */
  pgbenchClients: ReadonlyMap<number, number>;
  /** Chunks per kind and level, and each chunk's seconds. */
  rounds: number;
  seconds: number;
}

export const SWEEP: { full: SweepShape; quick: SweepShape } = {
  full: {
    callers: [16, 64, 256, 1024],
    pgbenchClients: new Map([
      [16, 16],
      [64, 64],
      [256, 128],
    ]),
    rounds: 2,
    seconds: 2,
  },
  quick: {
    callers: [16, 256],
    pgbenchClients: new Map([
      [16, 16],
      [256, 64],
    ]),
    rounds: 1,
    seconds: 1.5,
  },
};

/** The pool of `serve` (src/runtime/database.ts). */
const SWEEP_POOL = 20;
/**
 * Pairs per path: pair j's like and unlike are a cycle of 2 × PAIRS operations apart, far more
 * than the 1024 in flight, so nearly every write is CHANGED and no two in flight touch one pair.
 */
const PAIRS = 2048;
/**
 * How long after a chunk's end its unanswered HTTP requests are waited for: HTTP follows at 1024
 * connections (four statements each through the pool of 20) answered their last ones 45 s late.
 */
const GRACE_SECONDS = 2;
/** Pairs the warm-up sets and clears. */
const WARMUP_PAIRS = 256;
const libUser = (n: number) => `su${n}`;
const httpUser = (n: number) => `sh${n}`;
/** Followee of pair j: another account of the same path (7j + 1 ≠ j mod an even PAIRS), spread over the partitions. */
const followee = (j: number) => (7 * j + 1) % PAIRS;

const op = (kind: "like" | "follow", callers: number) =>
  `sweep: ${kind === "like" ? "like/unlike" : "follow/unfollow"}, ${callers} callers`;
const pgbenchOp = (clients: number) => `sweep: pgbench INSERT, ${clients} clients`;
const DRAIN_OP = "sweep: like consumer drain (events)";
const COUNT_READ_OP = "sweep: count read, 16 workers";
const PK_READ_OP = "sweep: primary-key SELECT, 16 workers";

/** Pair j of operation k of a cycle of 2 × PAIRS: the first pass sets, the second clears. */
function pair(k: number): { j: number; set: boolean } {
  return { j: k % PAIRS, set: Math.floor(k / PAIRS) % 2 === 0 };
}

/** Events not yet applied: the like counter's and the follower projector's (sum over partitions of last - watermark). */
const LAG_SQL = `
  SELECT (SELECT coalesce(sum(q.last - w.applied_upto), 0) FROM like_seq q JOIN counter_watermark w USING (part))::bigint AS likes,
         (SELECT coalesce(sum(q.last - w.applied_upto), 0) FROM event_seq q JOIN proj_watermark w USING (part))::bigint AS relations`;

async function readLag(pool: Pool): Promise<{ likes: number; relations: number }> {
  const { rows } = await pool.query<{ likes: string; relations: string }>(LAG_SQL);
  return { likes: Number(rows[0]!.likes), relations: Number(rows[0]!.relations) };
}

/** Lag samples every 100 ms while `run` runs (on a connection of its own, not queued behind the writers). */
async function sampledLag<T>(
  pool: Pool,
  which: "likes" | "relations",
  run: () => Promise<T>,
): Promise<{ value: T; samples: number[] }> {
  const samples: number[] = [];
  let running = true;
  const sampler = (async () => {
    while (running && !abort.signal.aborted) {
      samples.push((await readLag(pool))[which]);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  try {
    return { value: await run(), samples };
  } finally {
    running = false;
    await sampler;
  }
}

interface LagFigures {
  samples: number[];
  writes: number;
  batches: number;
}

function httpSpec(t: Target, kind: "like" | "follow"): (k: number) => HttpRequestSpec {
  return (k) => {
    const { j, set } = pair(k);
    const path =
      kind === "like" ? `/v1/items/${item(j % ITEMS)}/likes/me` : `/v1/accounts/me/following/${httpUser(followee(j))}`;
    return { method: set ? "PUT" : "DELETE", path, authorization: t.auth[j]! };
  };
}

function libraryOp(t: Target, kind: "like" | "follow"): (k: number) => Promise<unknown> {
  return (k) => {
    const { j, set } = pair(k);
    if (kind === "like") {
      const [user, itemId] = [libUser(j), item(j % ITEMS)];
      return set ? t.ledger.likes.like(user, itemId) : t.ledger.likes.unlike(user, itemId);
    }
    const [follower, other] = [libUser(j), libUser(followee(j))];
    return set ? t.ledger.relations.follow(follower, other) : t.ledger.relations.unfollow(follower, other);
  };
}

/**
 * Where each kind and path is in its cycle of pairs: it goes on from there at the next level (and
 * the drain goes on from the library's likes), so a set is never sent to a pair that is set.
 */
type Positions = Map<string, number>;

/** One kind of a level: its chunks run with the lag sampled; the samples collect in `lag`. */
function sweepKind(
  t: Target,
  lagPool: Pool,
  kind: "like" | "follow",
  path: "library" | "HTTP",
  callers: number,
  lag: LagFigures,
  positions: Positions,
): WriteKind {
  const key = `${kind} ${path}`;
  // Group commit's batches while this kind runs (kinds take turns, so the difference is its own).
  const batches = () => (kind === "like" ? t.ledger.likes : t.ledger.relations).batchStats?.();
  const run = async (chunk: Chunk): Promise<Figures> => {
    const first = positions.get(key) ?? 0;
    const figures = await runChunk(first, chunk.seconds);
    // Abandoned requests were sent (and may have written): the next chunk starts after them.
    positions.set(key, first + figures.ops + (figures.abandoned ?? 0));
    return figures;
  };
  const runChunk = (first: number, seconds: number): Promise<Figures> =>
    path === "library"
      ? runForSeconds(seconds, callers, libraryOp(t, kind), abort.signal, first)
      : runHttp({
          url: t.baseUrl,
          seconds,
          graceSeconds: GRACE_SECONDS,
          cycle: 2 * PAIRS,
          first: first % (2 * PAIRS),
          connections: callers,
          onInstance: (i) => (started.cannon = i),
          build: httpSpec(t, kind),
        });
  return {
    op: op(kind, callers),
    path,
    ...(kind === "follow" ? { events: relationEventsWritten } : {}),
    run: async (chunk) => {
      const before = batches();
      const { value, samples } = await sampledLag(lagPool, kind === "like" ? "likes" : "relations", () => run(chunk));
      const after = batches();
      lag.samples.push(...samples);
      if (before && after) {
        lag.writes += after.writes - before.writes;
        lag.batches += after.batches - before.batches;
      }
      return value;
    },
    extraNote: () =>
      `lag max ${Math.max(0, ...lag.samples)} (${lag.samples.length} samples)` +
      (lag.batches > 0 ? `, ${(lag.writes / lag.batches).toFixed(1)} writes per batch` : ""),
  };
}

/** A pgbench chunk that measured nothing (its connections took all of -T) is an error of the row, not of the run. */
function survivable(kind: WriteKind): WriteKind {
  return {
    ...kind,
    run: (chunk) =>
      kind.run(chunk).catch((err: unknown) => {
        if (abort.signal.aborted) throw err;
        const message = err instanceof Error ? err.message.split("\n")[0]! : String(err);
        return {
          ops: 0,
          seconds: 0,
          opsPerSec: 0,
          p50Ms: Number.NaN,
          p99Ms: Number.NaN,
          errors: 1,
          firstError: message,
        };
      }),
  };
}

export interface SweepResult {
  rows: Row[];
  targets: Target[];
}

/** The sweep at P = 1 and the default P, each on a database of its own; pgbench runs on each. */
export async function runSweep(
  cluster: EmbeddedCluster,
  o: Opts,
  pgbench: string | undefined,
  shape: SweepShape,
): Promise<SweepResult> {
  const defaultP = numericDefault("LEDGER_PARTITIONS");
  const partitions = [...new Set([1, defaultP])];
  const tokens = Array.from({ length: PAIRS }, (_, n) => httpUser(n));
  const rows: Row[] = [];
  const targets: Target[] = [];
  for (const p of partitions) {
    process.stderr.write(`  concurrency sweep, P=${p}: ${shape.callers.join("/")} callers\n`);
    const t = await openTarget(cluster, p, SWEEP_POOL, tokens, { database: `sweep_p${p}`, accounts: 0 });
    targets.push(t);
    await t.pool.query(
      "INSERT INTO account (account_id) SELECT prefix || n FROM generate_series(0, $1::int - 1) AS n, unnest(ARRAY['su', 'sh']) AS prefix",
      [PAIRS],
    );
    const lagPool = createPool({ connectionString: cluster.connectionString(t.database), max: 1 });
    started.pools.push(lagPool);
    // Warm-up: every HTTP user's token verified once (a read), JIT and plan caches (the first
    // WARMUP_PAIRS pairs set and cleared again, so the sweep starts with every pair clear).
    await runHttp({
      url: t.baseUrl,
      amount: PAIRS,
      connections: 64,
      onInstance: (i) => (started.cannon = i),
      build: (k) => ({ method: "GET", path: `/v1/items/${item(k % ITEMS)}/likes/me`, authorization: t.auth[k]! }),
    });
    const setAndClear = (k: number) => (k < WARMUP_PAIRS ? k : PAIRS + k - WARMUP_PAIRS);
    for (const kind of ["like", "follow"] as const) {
      await runHttp({
        url: t.baseUrl,
        amount: 2 * WARMUP_PAIRS,
        connections: 64,
        onInstance: (i) => (started.cannon = i),
        build: (k) => httpSpec(t, kind)(setAndClear(k)),
      });
      const op = libraryOp(t, kind);
      await runFixedCount(2 * WARMUP_PAIRS, 64, (k) => op(setAndClear(k)), abort.signal);
    }
    await t.ledger.likeConsumer.drain();
    await t.ledger.projector.drain();
    checkAbort();
    // The loops as serve runs them (its idle wait too); without them (--sweep-consumers-off) the writers' CPU per operation is their own.
    const workers = o.sweepConsumers ? createWorkers(t.ledger) : [];
    for (const w of workers) w.start();
    const positions: Positions = new Map();
    try {
      for (const callers of shape.callers) {
        const lags: LagFigures[] = [];
        const kind = (k: "like" | "follow", path: "library" | "HTTP") => {
          const lag: LagFigures = { samples: [], writes: 0, batches: 0 };
          lags.push(lag);
          return sweepKind(t, lagPool, k, path, callers, lag, positions);
        };
        const kinds: WriteKind[] = [kind("like", "library"), kind("like", "HTTP")];
        kinds.push(kind("follow", "library"), kind("follow", "HTTP"));
        const clients = shape.pgbenchClients.get(callers);
        if (pgbench && clients !== undefined)
          kinds.push(
            survivable(
              pgbenchInsertKind(
                pgbench,
                cluster,
                t,
                shape.rounds * shape.seconds,
                shape.rounds,
                clients,
                pgbenchOp(clients),
              ),
            ),
          );
        const made = await alternatingWrites(t, kinds, shape.rounds, shape.seconds);
        made.forEach((row, i) => {
          const samples = lags[i]?.samples;
          const lag = lags[i];
          row.extra = {
            ...row.extra,
            callers,
            ...(lag && lag.batches > 0 ? { writesPerBatch: lag.writes / lag.batches } : {}),
            ...(samples ? { lagMax: Math.max(0, ...samples), lagLast: samples[samples.length - 1] ?? 0 } : {}),
          };
          if (row.path === "pgbench") row.extra.clients = clients;
          progress(row);
        });
        rows.push(...made);
        if (!o.sweepConsumers) await drainAll(t);
        checkAbort();
      }
    } finally {
      for (const w of workers) await w.stop();
    }
    rows.push(await drainRow(t, lagPool, Math.max(...shape.callers.filter((c) => c <= 256)), shape.seconds, positions));
    progress(rows[rows.length - 1]!);
    await t.ledger.projector.drain();
    for (const row of await interleavedReadPhase(t, o, COUNT_READ_OP, PK_READ_OP, 16)) {
      rows.push(row);
      progress(row);
    }
  }
  return { rows, targets };
}

/** Every consumer of the ledger brought to its outbox's end (what createWorkers would have applied meanwhile). */
async function drainAll(t: Target): Promise<void> {
  const l = t.ledger;
  await Promise.all([l.likeConsumer.drain(), l.projector.drain(), l.commentConsumer.drain()]);
  await l.notifications.drain();
  await l.feed.drain();
}

/** A backlog written at `callers` with the consumers stopped, then drained by the service's consumer loops: events/s. */
async function drainRow(
  t: Target,
  lagPool: Pool,
  callers: number,
  seconds: number,
  positions: Positions,
): Promise<Row> {
  const first = positions.get("like library") ?? 0;
  const written = await runForSeconds(Math.max(2, seconds), callers, libraryOp(t, "like"), abort.signal, first);
  positions.set("like library", first + written.ops);
  const backlog = (await readLag(lagPool)).likes;
  const workers = createWorkers(t.ledger, { idleMs: 5 });
  const t0 = performance.now();
  for (const w of workers) w.start();
  // Drained when the lag is seen at 0; stopping the loops afterwards (every loop's round in flight) is not part of it.
  let drained: number;
  try {
    while ((await readLag(lagPool)).likes > 0 && !abort.signal.aborted) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    drained = (performance.now() - t0) / 1000;
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
  return {
    op: DRAIN_OP,
    path: "library",
    partitions: t.partitions,
    figures: {
      ops: backlog,
      seconds: drained,
      opsPerSec: backlog / drained,
      p50Ms: Number.NaN,
      p99Ms: Number.NaN,
      errors: 0,
    },
    note: `backlog of ${backlog} like events drained by the service's consumer loops (createWorkers)`,
    extra: { backlog },
  };
}

const changedPerSec = (r: Row) => Number(r.extra?.changed ?? r.figures.ops) / r.figures.seconds;

/** The compact table: one line per level and path, like and follow side by side. */
export function formatSweep(rows: readonly Row[]): string {
  const lines: string[][] = [
    [
      "P",
      "callers",
      "path",
      "like/s",
      "p50",
      "p99",
      "lag max",
      "node µs",
      "all µs",
      "per batch",
      "follow/s",
      "p50",
      "p99",
      "lag max",
      "node µs",
      "all µs",
      "per batch",
    ],
  ];
  const num = (v: number, d = 0) =>
    Number.isFinite(v) ? v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }) : "-";
  const cells = (r: Row | undefined) =>
    r
      ? [
          num(changedPerSec(r)),
          num(r.figures.p50Ms, 1),
          num(r.figures.p99Ms, 1),
          num(Number(r.extra?.lagMax)),
          num(r.figures.mainCpuUsPerOp ?? Number.NaN),
          num(Number(r.extra?.machineCpuUsPerOp ?? Number.NaN)),
          num(Number(r.extra?.writesPerBatch ?? Number.NaN), 1),
        ]
      : ["-", "-", "-", "-", "-", "-", "-"];
  for (const p of [...new Set(rows.map((r) => r.partitions))]) {
    const levels = [
      ...new Set(rows.filter((r) => r.partitions === p && r.extra?.callers).map((r) => r.extra!.callers)),
    ];
    for (const callers of levels as number[]) {
      for (const path of ["library", "HTTP"] as const) {
        const find = (kind: "like" | "follow") =>
          rows.find((r) => r.partitions === p && r.op === op(kind, callers) && r.path === path);
        lines.push([String(p), String(callers), path, ...cells(find("like")), ...cells(find("follow"))]);
      }
      const pg = rows.find((r) => r.partitions === p && r.path === "pgbench" && r.extra?.callers === callers);
      if (pg)
        lines.push([
          String(p),
          `${pg.extra!.clients} cl.`,
          "pgbench INSERT",
          num(pg.figures.opsPerSec),
          num(pg.figures.p50Ms, 1),
          num(pg.figures.p99Ms, 1),
          "",
          "",
          num(Number(pg.extra?.machineCpuUsPerOp ?? Number.NaN)),
        ]);
    }
    const drain = rows.find((r) => r.partitions === p && r.op === DRAIN_OP);
    if (drain) lines.push([String(p), "", "consumer drain", num(drain.figures.opsPerSec), "", "", "", ""]);
  }
  const widths = lines[0]!.map((_, i) => Math.max(...lines.map((l) => (l[i] ?? "").length)));
  return lines
    .map((l) => l.map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  "))
    .join("\n");
}

export interface SweepRatio {
  figure: string;
  partitions: number;
  value: number;
  goal: string;
  met: boolean;
}

/** The goals of the write path under concurrency, from the sweep's rows (both sides of each from this run). */
export function sweepRatios(rows: readonly Row[]): SweepRatio[] {
  const out: SweepRatio[] = [];
  const defaultP = numericDefault("LEDGER_PARTITIONS");
  for (const p of [...new Set(rows.map((r) => r.partitions))]) {
    const at = rows.filter((r) => r.partitions === p);
    const like = (callers: number, path: Row["path"] = "library") =>
      at.find((r) => r.op === op("like", callers) && r.path === path);
    const likes = at.filter((r) => r.op.startsWith("sweep: like/unlike") && r.path === "library");
    const pgbenchRows = at.filter((r) => r.path === "pgbench" && r.figures.ops > 0);
    const peakLike = Math.max(...likes.map(changedPerSec));
    const peakPg = Math.max(...pgbenchRows.map((r) => r.figures.opsPerSec));
    const goal = p === defaultP;
    const add = (figure: string, value: number, goalText: string, met: (v: number) => boolean) => {
      if (Number.isFinite(value)) out.push({ figure, partitions: p, value, goal: goalText, met: met(value) });
    };
    add(
      "peak like CHANGED/s ÷ pgbench peak INSERT/s",
      peakLike / peakPg,
      goal ? "≥ 1.5" : "",
      (v) => !goal || v >= 1.5,
    );
    const like16 = like(16);
    const pg16 = pgbenchRows.find((r) => r.extra?.clients === 16);
    if (like16 && pg16)
      add(
        "like CHANGED/s at 16 callers ÷ pgbench INSERT/s at 16 clients",
        changedPerSec(like16) / pg16.figures.opsPerSec,
        goal ? "≥ 0.5" : "",
        (v) => !goal || v >= 0.5,
      );
    const like1024 = like(1024);
    if (like1024)
      add("like p99 at 1024 callers (ms)", like1024.figures.p99Ms, goal ? "≤ 100" : "", (v) => !goal || v <= 100);
    const drain = at.find((r) => r.op === DRAIN_OP);
    if (drain)
      add(
        "consumer drain events/s ÷ peak like CHANGED/s",
        drain.figures.opsPerSec / peakLike,
        "≥ 1.5",
        (v) => v >= 1.5,
      );
    const http256 = like(256, "HTTP");
    const lib256 = like(256);
    if (http256 && lib256)
      add(
        "HTTP like/s ÷ library like/s at 256 connections/callers",
        http256.figures.opsPerSec / lib256.figures.opsPerSec,
        "≥ 0.7",
        (v) => v >= 0.7,
      );
    const reads = at.find((r) => r.op === COUNT_READ_OP);
    const pk = at.find((r) => r.op === PK_READ_OP);
    if (reads && pk)
      add(
        "count read p99 ÷ primary-key SELECT p99 (16 workers)",
        reads.figures.p99Ms / pk.figures.p99Ms,
        "≤ 1.2",
        (v) => v <= 1.2,
      );
  }
  return out;
}

export function formatSweepRatios(list: readonly SweepRatio[]): string {
  const width = Math.max(...list.map((r) => r.figure.length));
  return list
    .map(
      (r) =>
        `${r.figure.padEnd(width)}  P=${String(r.partitions).padEnd(2)}  ${r.value.toFixed(2).padStart(7)}  ${r.goal === "" ? "(no goal at this P)" : `goal ${r.goal.padEnd(5)}  ${r.met ? "met" : "NOT MET"}`}`,
    )
    .join("\n");
}
