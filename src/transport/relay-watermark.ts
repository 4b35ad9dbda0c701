import type { Pool, PoolClient } from "../db/pool.ts";
import { holdRetention } from "../db/retention-boundary.ts";
import { withTransaction } from "../db/transaction.ts";
import type { TransportKindName } from "./transport-kinds.ts";

/** The relay's name in retention_hold: retention never prunes an outbox row the relay has not published. */
export const RELAY_RETENTION_HOLDER = "nats-relay";

/**
 * The relay's progress rows (relay_watermark) and what retention may take from them. Table names are
 * the fixed ones of each kind (the same as src/counters/watermark.ts), never input.
 */
const KIND_TABLES: Record<TransportKindName, { sequence: string; watermark: string }> = {
  likes: { sequence: "like_seq", watermark: "counter_watermark" },
  relations: { sequence: "event_seq", watermark: "proj_watermark" },
  comments: { sequence: "comment_seq", watermark: "comment_watermark" },
};

/**
 * A relay's first run for a kind starts at the consumer's watermark: every event at or below it has
 * been processed, so no consumer needs it from the broker (and the outbox below it may already be
 * pruned). Later runs keep the row they find. Every run then holds retention at its rows
 * (holdRelayPosition), so the outbox above them stays until published.
 */
export async function ensureRelayRows(pool: Pool, kind: TransportKindName): Promise<void> {
  await pool.query(
    `INSERT INTO relay_watermark (kind, part, published_upto)
     SELECT $1, part, applied_upto FROM ${KIND_TABLES[kind].watermark}
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
async function holdRelayPosition(client: PoolClient, kind: TransportKindName, part: number): Promise<void> {
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

export async function readRelayWatermark(pool: Pool, kind: TransportKindName, part: number): Promise<number> {
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
  kind: TransportKindName,
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
    `SELECT applied_upto FROM ${KIND_TABLES[kind].watermark} WHERE part = $1`,
    [part],
  );
  return Number(rows[0]?.applied_upto ?? 0);
}

export interface TransportLagRow {
  kind: TransportKindName;
  part: number;
  /** The outbox's last position. */
  last: number;
  /** Published to the broker (null: no relay has run for this kind). */
  published: number | null;
  /** The consumer's contiguous watermark. */
  applied: number;
}

/** Per kind and partition, read in one statement (one snapshot): relay lag = last - published, consumer lag = last - applied. */
export async function transportLag(pool: Pool): Promise<TransportLagRow[]> {
  const parts = (Object.keys(KIND_TABLES) as TransportKindName[]).map((kind) => {
    const t = KIND_TABLES[kind];
    return `SELECT '${kind}'::text AS kind, s.part, s.last, w.applied_upto AS applied FROM ${t.sequence} s JOIN ${t.watermark} w USING (part)`;
  });
  const { rows } = await pool.query<{
    kind: TransportKindName;
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
