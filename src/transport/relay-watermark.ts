import type { Pool } from "../db/pool.ts";
import type { TransportKindName } from "./transport-kinds.ts";

/**
 * The relay's progress rows (migration 013) and what retention may take from them. Table names are
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
 * pruned). Later runs keep the row they find.
 */
export async function ensureRelayRows(pool: Pool, kind: TransportKindName): Promise<void> {
  await pool.query(
    `INSERT INTO relay_watermark (kind, part, published_upto)
     SELECT $1, part, applied_upto FROM ${KIND_TABLES[kind].watermark}
     ON CONFLICT DO NOTHING`,
    [kind],
  );
}

export async function readRelayWatermark(pool: Pool, kind: TransportKindName, part: number): Promise<number> {
  const { rows } = await pool.query<{ published_upto: number }>(
    "SELECT published_upto FROM relay_watermark WHERE kind = $1 AND part = $2", [kind, part],
  );
  return rows[0]?.published_upto ?? 0;
}

/**
 * Records that 1..upto are published. Monotone (never lowers it): two relays that raced over the same
 * range both published a contiguous prefix, and the larger of the two is still a published prefix.
 */
export async function advanceRelayWatermark(pool: Pool, kind: TransportKindName, part: number, upto: number): Promise<void> {
  await pool.query(
    `UPDATE relay_watermark SET published_upto = $3, updated_at = now()
      WHERE kind = $1 AND part = $2 AND published_upto < $3`,
    [kind, part, upto],
  );
}

/**
 * The transport's constraint on outbox retention, for the prune boundary to take (docs/transport-jetstream.md,
 * "Retention"): rows (part, ceiling) meaning "the outbox of this kind and partition may be pruned at or
 * below `ceiling` as far as the relay is concerned". The prune boundary is the least of this and the
 * consumer's watermark. No row for a partition: no relay has ever run for it, no constraint.
 */
export const RELAY_PRUNE_CEILING_SQL = "SELECT part, published_upto AS ceiling FROM relay_watermark WHERE kind = $1 ORDER BY part";

export async function relayPruneCeiling(pool: Pool, kind: TransportKindName): Promise<Map<number, number>> {
  const { rows } = await pool.query<{ part: number; ceiling: number }>(RELAY_PRUNE_CEILING_SQL, [kind]);
  return new Map(rows.map((r) => [r.part, Number(r.ceiling)]));
}

/** The consumer's contiguous watermark of one partition (read without a lock: it only grows). */
export async function consumerWatermark(pool: Pool, kind: TransportKindName, part: number): Promise<number> {
  const { rows } = await pool.query<{ applied_upto: number }>(
    `SELECT applied_upto FROM ${KIND_TABLES[kind].watermark} WHERE part = $1`, [part],
  );
  return Number(rows[0]?.applied_upto ?? 0);
}

/** The partition's last (final) position: every outbox row at or below it is committed. */
export async function outboxLast(pool: Pool, kind: TransportKindName, part: number): Promise<number> {
  const { rows } = await pool.query<{ last: number }>(`SELECT last FROM ${KIND_TABLES[kind].sequence} WHERE part = $1`, [part]);
  return Number(rows[0]?.last ?? 0);
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
  const { rows } = await pool.query<{ kind: TransportKindName; part: number; last: string; published: string | null; applied: string }>(
    `SELECT k.kind, k.part, k.last, r.published_upto AS published, k.applied
       FROM (${parts.join(" UNION ALL ")}) k
       LEFT JOIN relay_watermark r ON r.kind = k.kind AND r.part = k.part
      ORDER BY k.kind, k.part`,
  );
  return rows.map((r) => ({ kind: r.kind, part: r.part, last: Number(r.last), published: r.published === null ? null : Number(r.published), applied: Number(r.applied) }));
}
