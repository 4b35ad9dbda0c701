/** The write phases: likes through the library and HTTP in alternating chunks, follows, the projector's drain, the lag under load. */
import { transactionStats } from "../src/db/transaction.ts";
import type { Pool } from "../src/db/pool.ts";
import { createWorkers } from "../src/ledger.ts";
import type { LikeService } from "../src/likes/like-service.ts";
import { readCount } from "../src/likes/like-audit.ts";
import { chapterSetLiked, rawInsert } from "./baselines.ts";
import { machineCpu, machineCpuSince } from "./machine-cpu.ts";
import { abort, checkAbort, started } from "./lifecycle.ts";
import { mergeFigures, runFixedCount, runForSeconds, runHttp, type Figures, type HttpRequestSpec } from "./load.ts";
import {
  BENCH_APPLICATION,
  HOT_ITEM,
  ITEMS,
  USERS,
  WRITE_CHUNKS,
  item,
  libUser,
  toggle,
  type Opts,
} from "./options.ts";
import { OP } from "./ratios.ts";
import { cpuNote, problems, type Row } from "./report.ts";
import { eventsWritten, type Target } from "./target.ts";
import { formatWaits, sampleWaits } from "./wait-events.ts";

/** One chunk of a timed write row: operations first, first + 1, ... for `seconds`. */
export interface Chunk {
  first: number;
  seconds: number;
}

/**
 * The `ops` of `toggle` for the timed rows: its cycle is then every user, so operation k and
 * k + USERS are the like and the unlike of one pair, and a row toggles the same pairs for as
 * long as it runs, whatever its rate.
 */
const TIMED_TOGGLE_OPS = 2 * USERS;

function likeToggle(
  t: Target,
  hot: boolean,
  ops: number,
  itemOf?: (j: number) => string,
): (k: number) => Promise<unknown> {
  return (k) => {
    const { j, like } = toggle(k, ops, USERS);
    const user = libUser(j % USERS);
    const itemId = itemOf ? itemOf(j) : hot ? HOT_ITEM : item(j % ITEMS);
    return like ? t.ledger.likes.like(user, itemId) : t.ledger.likes.unlike(user, itemId);
  };
}

/** `ops` like/unlike toggles through the library (the warm-up). */
export function libraryWrites(
  t: Target,
  o: Opts,
  hot: boolean,
  ops = o.ops,
  itemOf?: (j: number) => string,
): Promise<Figures> {
  return runFixedCount(ops, o.workers, likeToggle(t, hot, ops, itemOf), abort.signal);
}

/** One chunk of the library like/unlike row (mixed items, or the hot item). */
export function timedLibraryWrites(t: Target, o: Opts, hot: boolean, chunk: Chunk): Promise<Figures> {
  return runForSeconds(chunk.seconds, o.workers, likeToggle(t, hot, TIMED_TOGGLE_OPS), abort.signal, chunk.first);
}

/**
 * The mixed-items toggles through another LikeService of the same database, on users of its own
 * (`userPrefix`) so that its pairs and the ledger's row's never meet: the side-by-side rows of
 * issue 22, LEDGER_WRITE_BATCH_MAX = 1 (each write a batch of one, sent at once, as before group
 * commit).
 */
export function otherServiceWrites(likes: LikeService, userPrefix: string, o: Opts, chunk: Chunk): Promise<Figures> {
  return runForSeconds(
    chunk.seconds,
    o.workers,
    (k) => {
      const { j, like } = toggle(k, TIMED_TOGGLE_OPS, USERS);
      const user = `${userPrefix}${j % USERS}`;
      const itemId = item(j % ITEMS);
      return like ? likes.like(user, itemId) : likes.unlike(user, itemId);
    },
    abort.signal,
    chunk.first,
  );
}

/** The chapter's transaction with the same toggle pattern, users of its own (P = 1 databases only). */
export function chapterWrites(t: Target, o: Opts, chunk: Chunk): Promise<Figures> {
  return runForSeconds(
    chunk.seconds,
    o.workers,
    async (k) => {
      const { j, like } = toggle(k, TIMED_TOGGLE_OPS, USERS);
      await chapterSetLiked(t.pool, `cu${j % USERS}`, item(j % ITEMS), like);
    },
    abort.signal,
    chunk.first,
  );
}

let rawInsertIds = 0;
export function rawInserts(t: Target, o: Opts, chunk: Chunk): Promise<Figures> {
  return runForSeconds(
    chunk.seconds,
    o.workers,
    (k) => rawInsert(t.pool, ++rawInsertIds, libUser(k % USERS), item(k % ITEMS)),
    abort.signal,
    chunk.first,
  );
}

/** One kind of write of the alternating write phase. */
export interface WriteKind {
  op: string;
  path: Row["path"];
  /** One chunk of the row; the next chunk of the kind starts where this one's operations ended. */
  run: (chunk: Chunk) => Promise<Figures>;
  /** Rows that write no like event (the raw INSERT) count every successful operation as a change. */
  rawInsert?: boolean;
  /** The note's first words instead of the default ("distinct rows, autocommit" or the CHANGED share). */
  describe?: string;
  /** Appended to the note once the kind's chunks are done (the batch sizes of group commit). */
  extraNote?: () => string;
  /** Events written so far, the kind's CHANGED count; default the like events (like_seq). */
  events?: (pool: Pool) => Promise<number>;
}

/**
 * The write rows whose ratios issue 8 sets goals for, measured in alternating chunks: each kind's
 * run is `chunks` pieces of `seconds` each and the kinds take turns (the order rotating each round), so a
 * ratio of two kinds compares the same minutes of a shared machine rather than two moments a few
 * seconds apart (other processes' load came and went between phases and moved the ratios by 2x).
 * Per kind: events written, WAL, wait events and CPU summed over its chunks.
 */
export async function alternatingWrites(
  t: Target,
  kinds: readonly WriteKind[],
  chunks: number,
  seconds: number,
): Promise<Row[]> {
  const acc = kinds.map(() => ({
    runs: [] as Figures[],
    next: 0,
    changed: 0,
    wal: 0,
    retries: 0,
    busyMs: 0,
    totalMs: 0,
    waits: new Map<string, number>(),
  }));
  for (let c = 0; c < chunks; c++) {
    for (let n = 0; n < kinds.length; n++) {
      const index = (n + c) % kinds.length;
      const kind = kinds[index]!;
      const a = acc[index]!;
      const events = kind.events ?? eventsWritten;
      const events0 = await events(t.pool);
      const wal0 = await walPosition();
      const retries0 = transactionStats.retries;
      const waits = sampleWaits(started.sampler!, t.database, BENCH_APPLICATION);
      const cpu0 = machineCpu();
      const figures = await kind.run({ first: a.next, seconds });
      const cpu = machineCpuSince(cpu0);
      if (cpu) {
        a.busyMs += cpu.busyMs;
        a.totalMs += cpu.totalMs;
      }
      a.next += figures.ops;
      for (const [what, count] of await waits.stop()) a.waits.set(what, (a.waits.get(what) ?? 0) + count);
      a.wal += (await walPosition()) - wal0;
      a.changed += kind.rawInsert ? figures.ops - figures.errors : (await events(t.pool)) - events0;
      a.retries += transactionStats.retries - retries0;
      a.runs.push(figures);
      checkAbort();
    }
  }
  return kinds.map((kind, index) => {
    const a = acc[index]!;
    const figures = mergeFigures(a.runs);
    const note = [
      kind.describe ??
        (kind.rawInsert
          ? "distinct rows, autocommit"
          : `CHANGED ${((100 * a.changed) / Math.max(1, figures.ops)).toFixed(0)}%`),
      ...cpuNote(figures),
      ...(a.totalMs > 0
        ? [
            `machine CPU/op ${Math.round((1000 * a.busyMs) / Math.max(1, figures.ops))} µs (cores ${Math.round((100 * a.busyMs) / a.totalMs)}% busy)`,
          ]
        : []),
      `WAL ${Math.round(a.wal / Math.max(1, figures.ops))} B/op`,
      ...(kind.extraNote ? [kind.extraNote()] : []),
      formatWaits(a.waits),
      ...problems(figures),
    ];
    if (a.retries > 0) note.push(`${a.retries} tx retries`);
    return {
      op: kind.op,
      path: kind.path,
      partitions: t.partitions,
      figures,
      note: note.join(", "),
      extra: {
        changed: a.changed,
        txRetries: a.retries,
        walBytesPerOp: a.wal / Math.max(1, figures.ops),
        walBytesPerChange: a.wal / Math.max(1, a.changed),
        ...(a.totalMs > 0
          ? { machineCpuUsPerOp: (1000 * a.busyMs) / Math.max(1, figures.ops), machineBusyShare: a.busyMs / a.totalMs }
          : {}),
        waitSamples: Object.fromEntries(a.waits),
        chunks,
      },
    };
  });
}

/**
 * Follow/unfollow toggles (the same pattern as libraryWrites): pair j is account j following
 * account (j * 7 + 1) mod USERS, so followees spread over every partition. The unbatched row
 * (LEDGER_WRITE_BATCH_MAX = 1) follows (j * 7 + 2) mod USERS, so its pairs and the batched
 * row's never meet.
 */
function followWrites(t: Target, o: Opts, unbatched: boolean, chunk: Chunk): Promise<Figures> {
  const relations = unbatched ? t.relationsUnbatched : t.ledger.relations;
  return runForSeconds(
    chunk.seconds,
    o.workers,
    (k) => {
      const { j, like: follow } = toggle(k, TIMED_TOGGLE_OPS, USERS);
      const follower = `acct${j % USERS}`;
      const followee = `acct${(j * 7 + (unbatched ? 2 : 1)) % USERS}`;
      return follow ? relations.follow(follower, followee) : relations.unfollow(follower, followee);
    },
    abort.signal,
    chunk.first,
  );
}

export async function relationEventsWritten(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM event_seq");
  return rows[0]!.n;
}

/** Follows batched (the ledger's RelationService) and unbatched, in alternating timed chunks (issue 22's side by side). */
export function followPhase(t: Target, o: Opts): Promise<Row[]> {
  const kind = (unbatched: boolean): WriteKind => ({
    op: unbatched ? OP.followUnbatched : OP.follow,
    path: "library",
    events: relationEventsWritten,
    run: (chunk) => followWrites(t, o, unbatched, chunk),
    ...(unbatched ? {} : { extraNote: () => batchNote(t, "relations") }),
  });
  return alternatingWrites(t, [kind(false), kind(true)], WRITE_CHUNKS, o.chunkSeconds);
}

export async function projectorDrainPhase(t: Target): Promise<Row> {
  const t0 = performance.now();
  const verdicts = await t.ledger.projector.drain();
  const seconds = (performance.now() - t0) / 1000;
  const events = verdicts.applied + verdicts.stale + verdicts.dup;
  return {
    op: OP.projectorDrain,
    path: "library",
    partitions: t.partitions,
    figures: { ops: events, seconds, opsPerSec: events / seconds, p50Ms: Number.NaN, p99Ms: Number.NaN, errors: 0 },
    note: `applied ${verdicts.applied}, stale ${verdicts.stale}, dup ${verdicts.dup}`,
    extra: { ...verdicts },
  };
}

function httpToggle(
  t: Target,
  hot: boolean,
  amount: number,
  itemOf?: (j: number) => string,
): (k: number) => HttpRequestSpec {
  const users = t.auth.length;
  return (k) => {
    const { j, like } = toggle(k, amount, users);
    const itemId = itemOf ? itemOf(j) : hot ? HOT_ITEM : item(j % ITEMS);
    return { method: like ? "PUT" : "DELETE", path: `/v1/items/${itemId}/likes/me`, authorization: t.auth[j % users]! };
  };
}

/** `amount` like/unlike requests over HTTP (the warm-up). */
export function httpWrites(
  t: Target,
  o: Opts,
  hot: boolean,
  amount = o.requests,
  itemOf?: (j: number) => string,
): Promise<Figures> {
  return runHttp({
    url: t.baseUrl,
    amount,
    connections: o.connections,
    onInstance: (i) => (started.cannon = i),
    build: httpToggle(t, hot, amount, itemOf),
  });
}

/** One chunk of the HTTP like/unlike row: the cycle of requests likes, then unlikes, every HTTP user's pair. */
export function timedHttpWrites(t: Target, o: Opts, hot: boolean, chunk: Chunk): Promise<Figures> {
  const cycle = 2 * t.auth.length;
  return runHttp({
    url: t.baseUrl,
    seconds: chunk.seconds,
    cycle,
    first: chunk.first % cycle,
    connections: o.connections,
    onInstance: (i) => (started.cannon = i),
    build: httpToggle(t, hot, cycle),
  });
}

/**
 * Library writes at full speed (mixed items) with the consumer workers running in the same
 * process, as the service runs them; lag (one READ_COUNT_SQL statement) sampled every 100 ms.
 * The lag must stay bounded: its maximum, its last sample while writing, and how long the
 * workers take to catch up once the writers stop are the figures.
 */
export async function lagUnderLoadPhase(t: Target, o: Opts): Promise<Row> {
  const workers = createWorkers(t.ledger, { idleMs: 20 });
  for (const w of workers) w.start();
  const samples: number[] = [];
  let writing = true;
  const sampler = (async () => {
    while (writing) {
      samples.push((await readCount(t.pool, item(0), 0)).lag);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  const figures = await runFixedCount(
    2 * o.ops,
    o.workers,
    (k) => {
      const { j, like } = toggle(k, 2 * o.ops, USERS);
      return like
        ? t.ledger.likes.like(`lag${j % USERS}`, item(j % ITEMS))
        : t.ledger.likes.unlike(`lag${j % USERS}`, item(j % ITEMS));
    },
    abort.signal,
  );
  writing = false;
  await sampler;
  const t0 = performance.now();
  while ((await readCount(t.pool, item(0), 0)).lag > 0 && !abort.signal.aborted && performance.now() - t0 < 60_000) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const catchUpMs = performance.now() - t0;
  for (const w of workers) await w.stop();
  const maxLag = Math.max(0, ...samples);
  const lastLag = samples[samples.length - 1] ?? 0;
  return {
    op: OP.lagUnderLoad,
    path: "library",
    partitions: t.partitions,
    figures,
    note: [
      `lag max ${maxLag}, last ${lastLag} over ${samples.length} samples, caught up ${Math.round(catchUpMs)} ms after the writers stopped`,
      ...problems(figures),
    ].join(", "),
    extra: { lagSamples: samples, maxLag, lastLag, catchUpMs },
  };
}

export const WRITE_OPS: ReadonlySet<string> = new Set([
  OP.rawInsert,
  OP.mixed,
  OP.mixedUnbatched,
  OP.chapter,
  OP.hot,
  OP.follow,
]);

/** The cluster's current WAL insert position, in bytes. */
export async function walPosition(): Promise<number> {
  const { rows } = await started.admin!.query<{ lsn: string }>(
    "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS lsn",
  );
  return Number(rows[0]!.lsn);
}

/** Group commit's batches of the target's batched LikeService (or RelationService) so far (warm-up and HTTP rows included). */
export function batchNote(t: Target, service: "likes" | "relations" = "likes"): string {
  const s = t.ledger[service].batchStats();
  return `group commit so far: ${s.writes} writes in ${s.batches} batches, ${(s.writes / Math.max(1, s.batches)).toFixed(1)} per batch, largest ${s.largest}`;
}
