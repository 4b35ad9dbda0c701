import type { Pool } from "../db/pool.ts";
import { OUTBOX_OF_SOURCE, WEBHOOK_SOURCES, type WebhookSource } from "./webhook-events.ts";

/** A message an endpoint acknowledged with a 2xx. */
export interface DeliveredEvent {
  endpointId: string;
  source: WebhookSource;
  part: number;
  seq: number;
  timeline: number;
  webhookId: string;
  deliveredAt: Date;
}

/**
 * What this process's delivery loops delivered lately: per endpoint and partition the newest
 * `perCursor`, and none delivered more than `windowMs` before the newest delivery. Nothing here is
 * work: the cursors in the database decide what is sent. It is what the database cannot say after a
 * promotion that lost the cursors' last advances: which messages a receiver already holds
 * (docs/failover.md). A promotion loses what the standby had not received, seconds at most unless it
 * lagged: the window is a bound on that lag, not on the time since the primary died, because age is
 * counted from the newest delivery and no delivery happens between the primary's death and the
 * realignment that takes this memory; without the window a quiet cursor would keep its newest 1000
 * for hours. A process that restarts with the promotion forgets it, and then only the receiver can tell (the ids it holds that the new
 * primary's do not match).
 */
export class DeliveryMemory {
  private readonly byCursor = new Map<string, DeliveredEvent[]>();
  private sweptAt = 0;

  constructor(
    private readonly perCursor = 1_000,
    private readonly windowMs = 300_000,
  ) {}

  remember(event: DeliveredEvent): void {
    const key = `${event.endpointId}\u0000${event.source}\u0000${event.part}`;
    const list = this.byCursor.get(key) ?? [];
    list.push(event);
    if (list.length > this.perCursor) list.shift();
    this.byCursor.set(key, list);
    const newest = event.deliveredAt.getTime();
    if (newest - this.sweptAt >= this.windowMs / 10) this.forgetBefore(newest - this.windowMs, newest);
  }

  /** Everything remembered, forgotten from here. */
  take(): DeliveredEvent[] {
    const all = [...this.byCursor.values()].flat();
    this.byCursor.clear();
    return all;
  }

  private forgetBefore(oldest: number, now: number): void {
    this.sweptAt = now;
    for (const [key, list] of this.byCursor) {
      const keep = list.findIndex((d) => d.deliveredAt.getTime() >= oldest);
      if (keep < 0) this.byCursor.delete(key);
      else if (keep > 0) list.splice(0, keep);
    }
  }
}

/**
 * The delivered messages whose event the database does not hold under the same identity: the row at
 * the position has another timeline, or there is no row above the endpoint's cursor (a row missing at
 * or below it was pruned after delivery). One statement per source.
 */
export async function lostDeliveries(pool: Pool, delivered: readonly DeliveredEvent[]): Promise<DeliveredEvent[]> {
  const lost: DeliveredEvent[] = [];
  for (const source of WEBHOOK_SOURCES) {
    const own = delivered.filter((d) => d.source === source);
    if (own.length === 0) continue;
    const { rows } = await pool.query<{ ord: string }>(
      `SELECT d.ord FROM unnest($1::text[], $2::int[], $3::bigint[], $4::int[]) WITH ORDINALITY AS d(endpoint_id, part, seq, timeline, ord)
         LEFT JOIN ${OUTBOX_OF_SOURCE[source]} o ON o.part = d.part AND o.seq = d.seq
         LEFT JOIN webhook_cursor c ON c.endpoint_id = d.endpoint_id AND c.source = $5 AND c.part = d.part
        WHERE CASE WHEN o.seq IS NULL THEN d.seq > coalesce(c.delivered_upto, 0) ELSE o.timeline <> d.timeline END`,
      [own.map((d) => d.endpointId), own.map((d) => d.part), own.map((d) => d.seq), own.map((d) => d.timeline), source],
    );
    lost.push(...rows.map((r) => own[Number(r.ord) - 1]!));
  }
  return lost;
}

/** Records them for the audit's findings (webhook_lost_delivery); an endpoint deleted since has none. */
export async function recordLostDeliveries(pool: Pool, lost: readonly DeliveredEvent[]): Promise<void> {
  if (lost.length === 0) return;
  await pool.query(
    `INSERT INTO webhook_lost_delivery (endpoint_id, webhook_id, source, part, seq, timeline, delivered_at)
     SELECT d.* FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[], $7::timestamptz[])
                  AS d(endpoint_id, webhook_id, source, part, seq, timeline, delivered_at)
      WHERE EXISTS (SELECT 1 FROM webhook_endpoint e WHERE e.endpoint_id = d.endpoint_id)
     ON CONFLICT DO NOTHING`,
    [
      lost.map((d) => d.endpointId),
      lost.map((d) => d.webhookId),
      lost.map((d) => d.source),
      lost.map((d) => d.part),
      lost.map((d) => d.seq),
      lost.map((d) => d.timeline),
      lost.map((d) => d.deliveredAt),
    ],
  );
}

/** The findings the audit lists (not violations: the database is consistent, a receiver holds more). */
export const LOST_DELIVERIES_SQL = "SELECT count(*)::int AS n FROM webhook_lost_delivery";
