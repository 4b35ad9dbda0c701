import type { Pool, PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { LIKE_COUNTER } from "../likes/like-spec.ts";
import { COMMENT_COUNTER } from "../content/comment-spec.ts";
import { Hooks } from "../hooks.ts";
import {
  computeBoundaries,
  RETENTION_KINDS,
  type RetentionKind,
  RETENTION_TABLES,
  type PartitionBoundary,
  type RetentionCap,
  type RetentionMargin,
} from "../db/retention-boundary.ts";
import { LEGAL_TRANSITIONS, previousRelationStateSql } from "../relations/relation-audit.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";

export interface PruneReport {
  /** False when a like rebuild was running: nothing was pruned (try again later). */
  pruned: boolean;
  processedEventRows: number;
  projSeenRows: number;
}

/** The rebuild that reads a kind's outbox and dedup keys above its snapshot (relations have none). */
const REBUILD_LOCKS: Record<RetentionKind, string | undefined> = {
  likes: LIKE_COUNTER.rebuildLockKey,
  relations: undefined,
  comments: COMMENT_COUNTER.rebuildLockKey,
  // The feed's rebuild installs each reader's truth from the facts, never from the outbox.
  posts: undefined,
  // Nothing rebuilds from the webhook-only outboxes.
  blocks: undefined,
  accounts: undefined,
};

/**
 * Retention for the dedup keys: deletes processed_event and proj_seen rows at or below their
 * partition's watermark. Safe because (1) both consumers answer "dup" for any delivered seq at or
 * below the watermark without consulting the keys, and the watermark only grows; (2) a like
 * rebuild reads processed_event above its snapshot S_p, which may be below the watermark, so the
 * prune takes the rebuild's advisory lock and prunes nothing while one runs; a rebuild that starts
 * later takes S_p >= today's watermark. READ_COUNT_SQL and the audits read keys above the
 * watermark only. pruneRetained does this and the outboxes.
 */
export async function pruneDedupKeys(pool: Pool): Promise<PruneReport> {
  return withTransaction(pool, async (client) => {
    if (!(await tryRebuildLock(client, "likes"))) return { pruned: false, processedEventRows: 0, projSeenRows: 0 };
    const likes = await pruneKeys(client, "likes");
    const relations = await pruneKeys(client, "relations");
    return { pruned: true, processedEventRows: likes, projSeenRows: relations };
  });
}

async function tryRebuildLock(client: PoolClient, kind: RetentionKind): Promise<boolean> {
  const key = REBUILD_LOCKS[kind];
  if (key === undefined) return true;
  const { rows } = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [key]);
  return rows[0]!.ok;
}

/**
 * Deletes the kind's dedup keys at or below each watermark and records how far; and the other
 * views' seen keys (notifications, home timeline) at or below their own watermarks (their
 * consumers, too, answer dup below the watermark without asking them, and their rebuilds read
 * none: nothing to record).
 */
async function pruneKeys(client: PoolClient, kind: RetentionKind): Promise<number> {
  const t = RETENTION_TABLES[kind];
  if (t.keys === null || t.watermark === null) return 0;
  for (const n of t.others) {
    await client.query(
      `DELETE FROM ${n.keys} k USING ${n.watermark} w WHERE k.part = w.part AND k.seq <= w.applied_upto`,
    );
  }
  const { rows } = await client.query<{ n: number }>(
    `WITH gone AS (DELETE FROM ${t.keys} k USING ${t.watermark} w WHERE k.part = w.part AND k.seq <= w.applied_upto RETURNING k.part),
     marked AS (
       INSERT INTO retention_floor AS f (kind, part, keys_pruned_upto)
       SELECT $1, w.part, w.applied_upto FROM ${t.watermark} w
       ON CONFLICT (kind, part) DO UPDATE SET keys_pruned_upto = greatest(f.keys_pruned_upto, EXCLUDED.keys_pruned_upto)
       RETURNING 1)
     SELECT count(*)::int AS n FROM gone`,
    [kind],
  );
  return rows[0]!.n;
}

export interface RetentionOptions extends Partial<RetentionMargin> {
  /** Transports' extra upper bounds (docs/retention.md); the lowest of all of them counts. */
  caps?: readonly RetentionCap[];
  /** The most outbox rows deleted per transaction (default 20,000): short transactions, short row locks. */
  chunk?: number;
  /** Chunks sized to a time budget and rests between them (src/workers/pacer.ts); default DEFAULT_PACING. */
  pacing?: PacingOptions;
  hooks?: Hooks;
}

export interface KindRetention {
  kind: RetentionKind;
  /** Why this kind's outbox was left alone, if it was. */
  skipped?: "REBUILD_RUNNING" | "CAP_UNAVAILABLE";
  keyRows: number;
  outboxRows: number;
  partitions: PartitionBoundary[];
}

export interface RetentionReport {
  kinds: KindRetention[];
}

/** Defaults of the margin: a day of events and the newest 10,000 per partition stay (docs/retention.md says why). */
export const DEFAULT_MARGIN: RetentionMargin = { keepLast: 10_000, keepSeconds: 86_400 };

/**
 * `social-ledger prune` and the service's prune job: for every kind, the dedup keys at or below
 * the watermark, then the outbox events at or below the boundary (computeBoundaries), chunk by
 * chunk, each chunk adding the deleted rows' audit figures to the pruned-prefix baseline in the
 * same statement. A kind whose rebuild is running, or whose cap cannot be read, keeps its outbox
 * this time. Chunks are paced: each sized to the pacing's budget from the last full chunk of the
 * kind (at most `chunk` rows), with a rest after each in proportion to its duration.
 */
/** The smallest paced prune chunk (rows). */
export const PRUNE_MIN_CHUNK = 2_000;

export async function pruneRetained(pool: Pool, options: RetentionOptions = {}): Promise<RetentionReport> {
  const margin: RetentionMargin = {
    keepLast: options.keepLast ?? DEFAULT_MARGIN.keepLast,
    keepSeconds: options.keepSeconds ?? DEFAULT_MARGIN.keepSeconds,
  };
  const chunk = options.chunk ?? 20_000;
  const hooks = options.hooks ?? new Hooks();
  // At least PRUNE_MIN_CHUNK rows a chunk: a chunk's fixed cost (its bounds re-read) is tens of ms on a
  // loaded machine, and at 100 rows a chunk the prune ran at ~1,000 rows/s (bench:scale), slower than
  // the likes it must keep up with; the floor keeps a paced prune above the write rate it trails.
  const pacer = new Pacer(
    options.pacing ?? DEFAULT_PACING,
    chunk,
    Math.min(chunk, PRUNE_MIN_CHUNK),
    Math.min(chunk, PRUNE_MIN_CHUNK),
  );
  const kinds: KindRetention[] = [];
  for (const kind of RETENTION_KINDS) {
    const report: KindRetention = { kind, keyRows: 0, outboxRows: 0, partitions: [] };
    kinds.push(report);
    const keys = await withTransaction(pool, async (client) =>
      (await tryRebuildLock(client, kind)) ? pruneKeys(client, kind) : undefined,
    );
    if (keys === undefined) {
      report.skipped = "REBUILD_RUNNING";
      continue;
    }
    report.keyRows = keys;
    let caps: Map<number, number> | undefined;
    try {
      caps = await lowestCaps(kind, options.caps ?? []);
    } catch {
      report.skipped = "CAP_UNAVAILABLE";
      continue;
    }
    // The margin (its age bound walks the outbox) once per run; each chunk re-reads the safety bounds.
    const planned = await computeBoundaries(pool, kind, margin, caps);
    for (const { part, boundary: marginBound } of planned) {
      for (;;) {
        const size = pacer.size(kind);
        const t0 = performance.now();
        const step = await withTransaction(pool, (client) =>
          pruneOutboxChunk(client, kind, part, marginBound, caps, size, hooks),
        );
        if (step === "BUSY") {
          report.skipped = "REBUILD_RUNNING";
          break;
        }
        const ms = performance.now() - t0;
        // A chunk that stopped short of its size reached the boundary: it says nothing about a full one.
        pacer.record(kind, size, ms, step.upto < step.boundary.boundary);
        report.outboxRows += step.rows;
        if (step.rows > 0) await rest(pacer.restMs(ms));
        if (step.upto >= step.boundary.boundary) {
          report.partitions.push(step.boundary);
          break;
        }
      }
      if (report.skipped) break;
    }
  }
  return { kinds };
}

async function lowestCaps(
  kind: RetentionKind,
  caps: readonly RetentionCap[],
): Promise<Map<number, number> | undefined> {
  let lowest: Map<number, number> | undefined;
  for (const cap of caps) {
    const bounds = await cap(kind);
    if (!bounds) continue;
    lowest ??= new Map();
    for (const [part, upto] of bounds) lowest.set(part, Math.min(upto, lowest.get(part) ?? Infinity));
  }
  return lowest;
}

/**
 * One transaction: the rebuild lock (try), the partition's floor row locked (a holder registering
 * takes it FOR SHARE, so it either sees this prune's floor or this prune sees its hold), the
 * safety boundary re-read under that lock and capped by the run's margin bound, and one
 * statement that deletes floor+1..min(boundary, floor+chunk) and adds the deleted rows to the
 * baseline.
 */
async function pruneOutboxChunk(
  client: PoolClient,
  kind: RetentionKind,
  part: number,
  marginBound: number,
  caps: ReadonlyMap<number, number> | undefined,
  chunk: number,
  hooks: Hooks,
): Promise<"BUSY" | { rows: number; upto: number; boundary: PartitionBoundary }> {
  if (!(await tryRebuildLock(client, kind))) return "BUSY";
  await client.query("INSERT INTO retention_floor (kind, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [kind, part]);
  await client.query("SELECT 1 FROM retention_floor WHERE kind = $1 AND part = $2 FOR UPDATE", [kind, part]);
  const safe = (await computeBoundaries(client, kind, null, caps, part))[0]!;
  const boundary = { ...safe, boundary: Math.max(safe.floor, Math.min(safe.boundary, marginBound)) };
  const upto = Math.min(boundary.boundary, boundary.floor + chunk);
  if (upto <= boundary.floor) return { rows: 0, upto: boundary.floor, boundary };
  const rows = await deleteOutboxPrefix(client, kind, part, upto);
  await hooks.at("prune.beforeCommit", { kind, part, upto });
  return { rows, upto, boundary };
}

/**
 * Deletes the partition's outbox events at or below `upto`, adds them to the pruned-prefix
 * baseline and moves the floor, in one statement. It checks no boundary: pruneRetained calls it
 * with a proven one, and the negative controls with an unsafe one.
 */
export async function deleteOutboxPrefix(
  client: PoolClient,
  kind: RetentionKind,
  part: number,
  upto: number,
): Promise<number> {
  await client.query("INSERT INTO retention_floor (kind, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [kind, part]);
  const { rows } = await client.query<{ n: number }>(PRUNE_SQL[kind], [part, upto]);
  return rows[0]?.n ?? 0;
}

const RECORD_FLOOR = (kind: RetentionKind, extra: string) => `
  UPDATE retention_floor f
     SET pruned_upto = greatest(f.pruned_upto, $2), pruned_events = f.pruned_events + g.n, pruned_max_seq = greatest(f.pruned_max_seq, g.max_seq),
         misplaced_events = f.misplaced_events + g.misplaced${extra}, pruned_at = now()
    FROM g WHERE f.kind = '${kind}' AND f.part = $1
  RETURNING g.n::int AS n`;

/** Per kind: delete events <= $2 of partition $1, fold them into the baseline, move the floor. */
const PRUNE_SQL: Record<RetentionKind, string> = {
  likes: `
    WITH gone AS (DELETE FROM like_outbox WHERE part = $1 AND seq <= $2 RETURNING part, seq, user_id, item_id, delta, version),
    pairs AS (
      INSERT INTO like_outbox_pruned AS b (user_id, item_id, events, delta_sum, max_version)
      SELECT user_id, item_id, count(*), sum(delta), max(version) FROM gone GROUP BY 1, 2 ORDER BY 1, 2
      ON CONFLICT (user_id, item_id) DO UPDATE
         SET events = b.events + EXCLUDED.events, delta_sum = b.delta_sum + EXCLUDED.delta_sum,
             max_version = greatest(b.max_version, EXCLUDED.max_version)
      RETURNING 1),
    g AS (
      SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq,
             count(*) FILTER (WHERE gone.part <> ledger_partition(gone.user_id, c.partitions)) AS misplaced,
             (SELECT count(*) FROM pairs) AS pairs
        FROM gone, ledger_config c)
    ${RECORD_FLOOR("likes", "")}`,
  relations: `
    WITH gone AS (DELETE FROM relation_event WHERE part = $1 AND seq <= $2 RETURNING part, seq, follower, followee, state, version),
    judged AS (
      SELECT g.*, ${previousRelationStateSql("g", "p", "b")} AS prev_state
        FROM gone g
        LEFT JOIN relation_event p ON p.follower = g.follower AND p.followee = g.followee AND p.version = g.version - 1
        LEFT JOIN relation_event_pruned b ON b.follower = g.follower AND b.followee = g.followee),
    pairs AS (
      INSERT INTO relation_event_pruned AS b (follower, followee, events, max_version, last_state)
      SELECT DISTINCT ON (follower, followee) follower, followee, count(*) OVER w, max(version) OVER w, state
        FROM gone WINDOW w AS (PARTITION BY follower, followee) ORDER BY follower, followee, version DESC
      ON CONFLICT (follower, followee) DO UPDATE
         SET events = b.events + EXCLUDED.events,
             last_state = CASE WHEN EXCLUDED.max_version > b.max_version THEN EXCLUDED.last_state ELSE b.last_state END,
             max_version = greatest(b.max_version, EXCLUDED.max_version)
      RETURNING 1),
    g AS (
      SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq,
             count(*) FILTER (WHERE j.part <> ledger_partition(j.followee, c.partitions)) AS misplaced,
             count(*) FILTER (WHERE (j.prev_state, j.state) NOT IN ${LEGAL_TRANSITIONS}) AS illegal,
             (SELECT count(*) FROM pairs) AS pairs
        FROM judged j, ledger_config c)
    ${RECORD_FLOOR("relations", ", illegal_transitions = f.illegal_transitions + g.illegal")}`,
  comments: `
    WITH gone AS (DELETE FROM comment_outbox WHERE part = $1 AND seq <= $2 RETURNING part, seq, post_id, delta),
    posts AS (
      INSERT INTO comment_outbox_pruned AS b (post_id, delta_sum)
      SELECT post_id, sum(delta) FROM gone GROUP BY 1 ORDER BY 1
      ON CONFLICT (post_id) DO UPDATE SET delta_sum = b.delta_sum + EXCLUDED.delta_sum
      RETURNING 1),
    g AS (SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq, 0 AS misplaced, (SELECT count(*) FROM posts) AS posts FROM gone)
    ${RECORD_FLOOR("comments", "")}`,
  // Nothing reads a post event at or below the feed's watermark (the audit and the lag read pending
  // events only, the rebuild reads the facts): no baseline to fold them into.
  posts: `
    WITH gone AS (DELETE FROM post_outbox WHERE part = $1 AND seq <= $2 RETURNING seq),
    g AS (SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq, 0 AS misplaced FROM gone)
    ${RECORD_FLOOR("posts", "")}`,
  // Webhook delivery reads these above each endpoint's cursor only (a replay below the floor is
  // refused), and the audit checks their numbering through the floor's counts: no baseline.
  blocks: `
    WITH gone AS (DELETE FROM webhook_block_event WHERE part = $1 AND seq <= $2 RETURNING seq),
    g AS (SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq, 0 AS misplaced FROM gone)
    ${RECORD_FLOOR("blocks", "")}`,
  accounts: `
    WITH gone AS (DELETE FROM account_outbox WHERE part = $1 AND seq <= $2 RETURNING seq),
    g AS (SELECT count(*) AS n, coalesce(max(seq), 0) AS max_seq, 0 AS misplaced FROM gone)
    ${RECORD_FLOOR("accounts", "")}`,
};
