import type { Pool } from "../db/pool.ts";
import { CURSOR_END, CURSOR_END_JOINS } from "./webhook-events.ts";

/** Partitions whose kept rows plus the pruned prefix are not exactly 1..last. */
function gaplessSql(sequence: string, outbox: string, kind: string): string {
  return `
    SELECT count(*)::int AS n FROM ${sequence} s
      LEFT JOIN retention_floor f ON f.kind = '${kind}' AND f.part = s.part
     WHERE s.last <> (SELECT count(*) FROM ${outbox} e WHERE e.part = s.part) + coalesce(f.pruned_events, 0)
        OR s.last <> greatest((SELECT coalesce(max(seq), 0) FROM ${outbox} e WHERE e.part = s.part), f.pruned_max_seq)`;
}

/**
 * The webhook invariants, one SQL statement each (docs/webhooks.md); every query returns the
 * number of violating rows, 0 everywhere means healthy.
 */
export const WEBHOOK_INVARIANTS = {
  /** A cursor never passes its partition's last committed event. */
  cursorsPastEnd: `
    SELECT count(*)::int AS n FROM webhook_cursor c
    ${CURSOR_END_JOINS}
     WHERE c.delivered_upto > ${CURSOR_END}`,
  /** Every cursor holds its outbox's retention exactly at its position (the source is the retention kind). */
  holdsOffCursor: `
    SELECT count(*)::int AS n FROM webhook_cursor c
      LEFT JOIN retention_hold h ON h.holder = 'webhook:' || c.endpoint_id AND h.kind = c.source AND h.part = c.part
     WHERE h.upto IS DISTINCT FROM c.delivered_upto`,
  /** No event an endpoint has not passed was pruned: a cursor below the floor lost events. */
  cursorsBelowFloor: `
    SELECT count(*)::int AS n FROM webhook_cursor c
      JOIN retention_floor f ON f.kind = c.source AND f.part = c.part
     WHERE c.delivered_upto < f.pruned_upto`,
  /** The block outbox is gapless per partition: last = rows = max seq, pruned rows counted through retention_floor. */
  blockSequenceViolations: gaplessSql("webhook_block_seq", "webhook_block_event", "blocks"),
  /** The account outbox is gapless per partition, the same way. */
  accountSequenceViolations: gaplessSql("account_seq", "account_outbox", "accounts"),
} as const;

export type WebhookAudit = Record<keyof typeof WEBHOOK_INVARIANTS, number>;

export async function auditWebhooks(pool: Pool): Promise<WebhookAudit> {
  const out = {} as WebhookAudit;
  for (const key of Object.keys(WEBHOOK_INVARIANTS) as (keyof WebhookAudit)[]) {
    out[key] = (await pool.query<{ n: number }>(WEBHOOK_INVARIANTS[key])).rows[0]!.n;
  }
  return out;
}

export function webhookAuditClean(audit: WebhookAudit): boolean {
  return Object.values(audit).every((n) => n === 0);
}
