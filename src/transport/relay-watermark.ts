import type { Pool, PoolClient } from "../db/pool.ts";
import { holdRetention } from "../db/retention-boundary.ts";
import { withTransaction } from "../db/transaction.ts";
import type { OutboxKindName, TransportKindName } from "./transport-kinds.ts";

/** The relay's name in retention_hold: retention never prunes an outbox row the relay has not published. */
export const RELAY_RETENTION_HOLDER = "nats-relay";

/**
 * The relay's progress rows (relay_watermark, per outbox) and what retention may take from them.
 * Table names are the fixed ones of each outbox and consumer (the same as src/counters/watermark.ts
 * and src/feed/feed-sources.ts), never input.
 */
const CONSUMER_WATERMARK: Record<TransportKindName, string> = {
  likes: "counter_watermark",
  relations: "proj_watermark",
  comments: "comment_watermark",
  "feed-posts": "feed_post_watermark",
  "feed-relations": "feed_relation_watermark",
};

/** Each outbox's sequence table and the watermarks of the consumers the transport feeds from it. */
const OUTBOX_TABLES: Record<OutboxKindName, { sequence: string; watermarks: readonly string[] }> = {
  likes: { sequence: "like_seq", watermarks: [CONSUMER_WATERMARK.likes] },
  relations: {
    sequence: "event_seq",
    watermarks: [CONSUMER_WATERMARK.relations, CONSUMER_WATERMARK["feed-relations"]],
  },
  comments: { sequence: "comment_seq", watermarks: [CONSUMER_WATERMARK.comments] },
  posts: { sequence: "post_seq", watermarks: [CONSUMER_WATERMARK["feed-posts"]] },
};

/** The lowest watermark of the outbox's consumers per partition, as `applied` over the sequence table `s`. */
function lowestWatermarkSql(kind: OutboxKindName): string {
  const t = OUTBOX_TABLES[kind];
  return `SELECT s.part, s.last, least(${t.watermarks.map((_, i) => `w${i}.applied_upto`).join(", ")}) AS applied
            FROM ${t.sequence} s ${t.watermarks.map((w, i) => `JOIN ${w} w${i} ON w${i}.part = s.part`).join(" ")}`;
}

/**
 * A relay's first run for an outbox starts at the lowest watermark of its consumers: every event at
 * or below it has been processed by all of them, so no consumer needs it from the broker (and the outbox below it may already be
 * pruned). Later runs keep the row they find. Every run then holds retention at its rows
 * (holdRelayPosition), so the outbox above them stays until published.
 */
export async function ensureRelayRows(pool: Pool, kind: OutboxKindName): Promise<void> {
  await pool.query(
    `INSERT INTO relay_watermark (kind, part, published_upto)
     SELECT $1, part, applied FROM (${lowestWatermarkSql(kind)}) c
     ON CONFLICT DO NOTHING`,
    [kind],
  );
  const { rows } = await pool.query<{ part: number }>(
    "SELECT part FROM relay_watermark WHERE kind = $1 ORDER BY part",
    [kind],
  );
  for (const { part } of rows) await withTransaction(pool, (client) => holdRelayPosition(client, kind, part));
}

/**
 * Holds retention at the relay's position of one partition, under the floor row's share lock (the
 * prune takes it FOR UPDATE, so the two are ordered). A position below the floor (a relay row left
 * from before retention knew of it, and pruned past since) moves up to the floor first: those
 * events are at or below the consumer's watermark (retention never passes it), so no consumer needs
 * them from the broker, and a relay waiting for rows that are gone would stop for good.
 */
async function holdRelayPosition(client: PoolClient, kind: OutboxKindName, part: number): Promise<void> {
  await client.query("INSERT INTO retention_floor (kind, part) VALUES ($1, $2) ON CONFLICT DO NOTHING", [kind, part]);
  const { rows } = await client.query<{ published_upto: string }>(
    `UPDATE relay_watermark r SET published_upto = greatest(r.published_upto, f.pruned_upto)
       FROM (SELECT pruned_upto FROM retention_floor WHERE kind = $1 AND part = $2 FOR SHARE) f
      WHERE r.kind = $1 AND r.part = $2
      RETURNING r.published_upto`,
    [kind, part],
  );
  if (rows[0]) await holdRetention(client, RELAY_RETENTION_HOLDER, kind, part, Number(rows[0].published_upto));
}

export async function readRelayWatermark(pool: Pool, kind: OutboxKindName, part: number): Promise<number> {
  const { rows } = await pool.query<{ published_upto: number }>(
    "SELECT published_upto FROM relay_watermark WHERE kind = $1 AND part = $2",
    [kind, part],
  );
  return rows[0]?.published_upto ?? 0;
}

/**
 * Records that 1..upto are published and moves the relay's retention hold with it, in one
 * transaction. Monotone (never lowers it): two relays that raced over the same range both published
 * a contiguous prefix, and the larger of the two is still a published prefix.
 */
export async function advanceRelayWatermark(
  pool: Pool,
  kind: OutboxKindName,
  part: number,
  upto: number,
): Promise<void> {
  await withTransaction(pool, async (client) => {
    await client.query(
      `UPDATE relay_watermark SET published_upto = $3, updated_at = now()
        WHERE kind = $1 AND part = $2 AND published_upto < $3`,
      [kind, part, upto],
    );
    await holdRelayPosition(client, kind, part);
  });
}

/** The consumer's contiguous watermark of one partition (read without a lock: it only grows). */
export async function consumerWatermark(pool: Pool, kind: TransportKindName, part: number): Promise<number> {
  const { rows } = await pool.query<{ applied_upto: number }>(
    `SELECT applied_upto FROM ${CONSUMER_WATERMARK[kind]} WHERE part = $1`,
    [part],
  );
  return Number(rows[0]?.applied_upto ?? 0);
}

export interface TransportLagRow {
  kind: OutboxKindName;
  part: number;
  /** The outbox's last position. */
  last: number;
  /** Published to the broker (null: no relay has run for this kind). */
  published: number | null;
  /** The lowest contiguous watermark of the outbox's consumers. */
  applied: number;
}

/** Per outbox and partition, read in one statement (one snapshot): relay lag = last - published, consumer lag = last - applied. */
export async function transportLag(pool: Pool): Promise<TransportLagRow[]> {
  const parts = (Object.keys(OUTBOX_TABLES) as OutboxKindName[]).map(
    (kind) => `SELECT '${kind}'::text AS kind, c.* FROM (${lowestWatermarkSql(kind)}) c`,
  );
  const { rows } = await pool.query<{
    kind: OutboxKindName;
    part: number;
    last: string;
    published: string | null;
    applied: string;
  }>(
    `SELECT k.kind, k.part, k.last, r.published_upto AS published, k.applied
       FROM (${parts.join(" UNION ALL ")}) k
       LEFT JOIN relay_watermark r ON r.kind = k.kind AND r.part = k.part
      ORDER BY k.kind, k.part`,
  );
  return rows.map((r) => ({
    kind: r.kind,
    part: r.part,
    last: Number(r.last),
    published: r.published === null ? null : Number(r.published),
    applied: Number(r.applied),
  }));
}
