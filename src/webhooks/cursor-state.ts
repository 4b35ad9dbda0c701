import { OUTBOX_OF_SOURCE, SOURCES, WEBHOOK_SOURCES } from "./webhook-events.ts";

/**
 * Where every delivery cursor stands against its outbox partition: the partition's end, and
 * the commit time of the next event the cursor waits on. One statement for the admin routes and
 * the metrics (backlog, age of the oldest undelivered event per endpoint).
 */
export interface CursorState {
  endpointId: string;
  source: string;
  part: number;
  deliveredUpto: number;
  last: number;
  attempts: number;
  nextAttemptAt: Date;
  lastError: string | null;
  lastStatus: number | null;
  /** Seconds since the next event to deliver committed; null when there is none. */
  oldestPendingSeconds: number | null;
}

const perSource = (source: string, sequence: string, outbox: string) => `
  SELECT c.endpoint_id, c.source, c.part, c.delivered_upto, coalesce(s.last, 0) AS last, c.attempts, c.next_attempt_at, c.last_error, c.last_status,
         extract(epoch FROM now() - o.created_at)::float8 AS oldest
    FROM webhook_cursor c
    LEFT JOIN ${sequence} s ON s.part = c.part
    LEFT JOIN ${outbox} o ON o.part = c.part AND o.seq = c.delivered_upto + 1
   WHERE c.source = '${source}' AND ($1::text IS NULL OR c.endpoint_id = $1)`;

export const CURSOR_STATE_SQL = `
  SELECT endpoint_id AS "endpointId", source, part, delivered_upto AS "deliveredUpto", last, attempts,
         next_attempt_at AS "nextAttemptAt", last_error AS "lastError", last_status AS "lastStatus", oldest AS "oldestPendingSeconds"
    FROM (${WEBHOOK_SOURCES.map((source) => perSource(source, SOURCES[source].sequence, OUTBOX_OF_SOURCE[source])).join(" UNION ALL ")}) AS cursors
   ORDER BY endpoint_id, source, part`;
