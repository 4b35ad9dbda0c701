import { LedgerError } from "../errors.ts";
import type { Pool, PoolClient } from "./pool.ts";

/**
 * Where retention may cut each outbox (docs/retention.md). Per (kind, partition) the boundary is
 * the least of:
 *  - the contiguous watermarks of every view the outbox feeds (its counter or projection, and the
 *    notification view): every event at or below them is processed, and each consumer answers
 *    "dup" for any delivered seq at or below its watermark without reading the outbox or the dedup keys;
 *  - every retention_hold row of the (kind, part): a transport that still reads the outbox from a
 *    position it keeps in the database (a relay publishing the outbox elsewhere);
 *  - every extra cap the caller passes: a transport whose position lives outside the database
 *    (the Redis count layer's feeder cursor and last reconciled boundary);
 *  - the retention margin: last - keepLast, and below the oldest event younger than keepSeconds.
 * The first three are the safety bound; the margin is policy. The boundary never moves down.
 * The block and account outboxes feed no view (only webhook delivery reads them): their bound is
 * the endpoints' holds, and with no endpoint nothing reads them at all.
 */

/** The outboxes retention prunes, by the kind name retention_floor and retention_hold use. */
export type RetentionKind = "likes" | "relations" | "comments" | "posts" | "blocks" | "accounts";

/**
 * The outbox and its neighbours per kind: fixed names, never input. `others` are the watermarks
 * and seen keys of the other views that consume the same outbox (the notification view,
 * docs/notifications.md; the home timeline, docs/feed.md), which the prune waits for as well.
 */
export const RETENTION_TABLES = {
  likes: {
    outbox: "like_outbox",
    sequence: "like_seq",
    watermark: "counter_watermark",
    keys: "processed_event",
    others: [{ watermark: "notification_like_watermark", keys: "notification_like_seen" }],
  },
  relations: {
    outbox: "relation_event",
    sequence: "event_seq",
    watermark: "proj_watermark",
    keys: "proj_seen",
    others: [
      { watermark: "notification_relation_watermark", keys: "notification_relation_seen" },
      { watermark: "feed_relation_watermark", keys: "feed_relation_seen" },
    ],
  },
  comments: {
    outbox: "comment_outbox",
    sequence: "comment_seq",
    watermark: "comment_watermark",
    keys: "comment_processed",
    others: [{ watermark: "notification_comment_watermark", keys: "notification_comment_seen" }],
  },
  // The home timeline's watermark and seen keys are the kind's own (docs/feed.md); mentions in posts
  // are the notification view's (docs/notifications.md).
  posts: {
    outbox: "post_outbox",
    sequence: "post_seq",
    watermark: "feed_post_watermark",
    keys: "feed_post_seen",
    others: [{ watermark: "notification_post_watermark", keys: "notification_post_seen" }],
  },
  // Read only by webhook delivery (docs/webhooks.md), whose cursors hold retention: no view, no
  // watermark, no dedup keys.
  blocks: { outbox: "webhook_block_event", sequence: "webhook_block_seq", watermark: null, keys: null, others: [] },
  accounts: { outbox: "account_outbox", sequence: "account_seq", watermark: null, keys: null, others: [] },
} as const satisfies Record<
  RetentionKind,
  {
    outbox: string;
    sequence: string;
    /** The contiguous watermark of the view the outbox feeds; null: it feeds none. */
    watermark: string | null;
    /** That view's dedup keys; null: it feeds none. */
    keys: string | null;
    others: readonly { watermark: string; keys: string }[];
  }
>;

export const RETENTION_KINDS = Object.keys(RETENTION_TABLES) as RetentionKind[];

/**
 * An upper bound a transport imposes on one kind: part -> the highest seq it no longer needs.
 * Partitions it does not name are not capped. Throwing means "cannot say": that kind's outboxes
 * are not pruned this time (a cap that cannot be read cannot be proven).
 */
export type RetentionCap = (kind: RetentionKind) => Promise<ReadonlyMap<number, number> | undefined>;

export interface RetentionMargin {
  /** Keep at least the newest keepLast events of every partition. */
  keepLast: number;
  /** Keep every event from the oldest one younger than this on (by created_at). */
  keepSeconds: number;
}

export interface PartitionBoundary {
  kind: RetentionKind;
  part: number;
  last: number;
  /** The lowest watermark of the outbox's views; `last` for an outbox that feeds none. */
  watermark: number;
  /** Events 1..floor are already pruned. */
  floor: number;
  /** Lowest retention_hold of the partition, if any. */
  held: number | null;
  /** Lowest caller cap of the partition, if any. */
  capped: number | null;
  /** Where this prune may cut: events floor+1..boundary go (boundary >= floor). */
  boundary: number;
}

/**
 * One statement per kind reads, per partition (or only `part`), the watermark, the floor, the
 * lowest hold and, with a margin, the margin's bounds; the caps are applied on top. The age bound
 * walks the primary key from the floor up to the first young event, so its cost is the events
 * about to be pruned: pruneRetained computes it once per run, and each chunk re-reads only the
 * safety bounds (margin null).
 */
export async function computeBoundaries(
  client: PoolClient | Pool,
  kind: RetentionKind,
  margin: RetentionMargin | null,
  caps: ReadonlyMap<number, number> | undefined,
  part?: number,
): Promise<PartitionBoundary[]> {
  const t = RETENTION_TABLES[kind];
  const { rows } = await client.query<{
    part: number;
    last: number;
    watermark: number;
    floor: number;
    held: number | null;
    young: number | null;
  }>(
    `SELECT s.part, s.last, least(${[t.watermark ? "w.applied_upto" : "s.last", ...t.others.map((_, i) => `coalesce(o${i}.applied_upto, 0)`)].join(", ")}) AS watermark,
            coalesce(f.pruned_upto, 0) AS floor,
            (SELECT min(h.upto) FROM retention_hold h WHERE h.kind = $1 AND h.part = s.part) AS held,
            CASE WHEN $2::float8 IS NOT NULL THEN
              (SELECT o.seq FROM ${t.outbox} o
                WHERE o.part = s.part AND o.seq > coalesce(f.pruned_upto, 0) AND o.created_at >= now() - make_interval(secs => $2::float8)
                ORDER BY o.seq LIMIT 1) END AS young
       FROM ${t.sequence} s ${t.watermark ? `JOIN ${t.watermark} w USING (part)` : ""}
       ${t.others.map((o, i) => `LEFT JOIN ${o.watermark} o${i} ON o${i}.part = s.part`).join(" ")}
       LEFT JOIN retention_floor f ON f.kind = $1 AND f.part = s.part
      WHERE $3::int IS NULL OR s.part = $3
      ORDER BY s.part`,
    [kind, margin && margin.keepSeconds > 0 ? margin.keepSeconds : null, part ?? null],
  );
  return rows.map((r) => {
    const capped = caps?.get(r.part) ?? null;
    const bound = Math.min(
      r.watermark,
      r.held ?? Infinity,
      capped ?? Infinity,
      margin ? r.last - margin.keepLast : Infinity,
      r.young === null ? Infinity : r.young - 1,
    );
    return {
      kind,
      part: r.part,
      last: r.last,
      watermark: r.watermark,
      floor: r.floor,
      held: r.held,
      capped,
      boundary: Math.max(r.floor, bound),
    };
  });
}

/** The partition's outbox floor, read in the caller's transaction: delivered events at or below it can no longer be checked. */
export async function readFloor(client: PoolClient, kind: RetentionKind, part: number): Promise<number> {
  const { rows } = await client.query<{ pruned_upto: number }>(
    "SELECT pruned_upto FROM retention_floor WHERE kind = $1 AND part = $2",
    [kind, part],
  );
  return rows[0]?.pruned_upto ?? 0;
}

export class RebuildSnapshotPrunedError extends LedgerError {
  constructor(kind: string, part: number) {
    super(
      "REBUILD_SNAPSHOT_PRUNED",
      `a ${kind} prune committed between this rebuild's snapshot and its lock (partition ${part}); run the rebuild again`,
    );
  }
}

/**
 * A rebuild sums the events applied above its snapshot S_p, so it needs every outbox row and
 * dedup key above S_p. The prune takes the rebuild's lock and prunes at most to the watermark,
 * and a rebuild that takes its snapshot later has S_p >= that watermark; the one window left is
 * a whole prune committing between the rebuild's snapshot and its lock. Called once the rebuild
 * holds its lock (no prune can start any more), on a fresh statement that sees every committed
 * prune: a floor above S_p means that window happened, and the rebuild must not install.
 */
export async function assertSnapshotNotPruned(
  pool: Pool,
  kind: string,
  snapshotSeqs: readonly number[],
): Promise<void> {
  const { rows } = await pool.query<{ part: number; upto: number }>(
    "SELECT part, greatest(pruned_upto, keys_pruned_upto) AS upto FROM retention_floor WHERE kind = $1",
    [kind],
  );
  for (const r of rows) {
    if (r.upto > (snapshotSeqs[r.part] ?? 0)) throw new RebuildSnapshotPrunedError(kind, r.part);
  }
}

export class RetentionHoldBelowFloorError extends LedgerError {
  constructor(kind: string, part: number, upto: number, floor: number) {
    super(
      "RETENTION_HOLD_BELOW_FLOOR",
      `cannot hold ${kind} partition ${part} at ${upto}: events up to ${floor} are already pruned`,
    );
  }
}

/**
 * How a transport that reads an outbox from a position kept in the database (e.g. a relay)
 * caps retention: its position per (kind, part) in retention_hold, in the caller's transaction.
 * It reads the floor FOR SHARE, which a prune holds FOR UPDATE while it deletes: either the
 * prune sees this hold, or this sees the prune's floor and refuses a position below it.
 */
export async function holdRetention(
  client: PoolClient,
  holder: string,
  kind: RetentionKind,
  part: number,
  upto: number,
): Promise<void> {
  await client.query("INSERT INTO retention_floor (kind, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [kind, part]);
  const { rows } = await client.query<{ pruned_upto: number }>(
    "SELECT pruned_upto FROM retention_floor WHERE kind = $1 AND part = $2 FOR SHARE",
    [kind, part],
  );
  const floor = rows[0]!.pruned_upto;
  if (upto < floor) throw new RetentionHoldBelowFloorError(kind, part, upto, floor);
  await client.query(
    `INSERT INTO retention_hold (holder, kind, part, upto) VALUES ($1, $2, $3, $4)
     ON CONFLICT (holder, kind, part) DO UPDATE SET upto = EXCLUDED.upto, updated_at = now()`,
    [holder, kind, part, upto],
  );
}

/** A retired transport's holds go, or retention stays capped at its last position for good. */
export async function releaseRetention(client: PoolClient | Pool, holder: string): Promise<number> {
  const { rowCount } = await client.query("DELETE FROM retention_hold WHERE holder = $1", [holder]);
  return rowCount ?? 0;
}
