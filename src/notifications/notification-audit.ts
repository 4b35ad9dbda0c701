import type { Pool } from "../db/pool.ts";
import { pendingEventSql } from "./notification-sources.ts";

export interface NotificationAudit {
  /** Active view rows the facts do not give (and no pending event explains). */
  extra: number;
  /** Notifications the facts give that the view lacks (and no pending event explains). */
  missing: number;
  /** Rows in both whose type or id differ (and no pending event explains). */
  differing: number;
  /** Rows that notify their own actor. */
  selfNotifications: number;
  /** Differences on pairs with an event not yet consumed: lag, not a lie. */
  explainedByPending: number;
  /** Events above the notification watermarks, all sources and partitions. */
  lag: number;
}

/**
 * THE notification invariant as one statement: the view's active rows equal the facts'
 * (the view notification_truth, the rebuild's source too), pair and recipient by pair and
 * recipient, with the type and the id (which carries the time and the version), except on pairs
 * with an event the consumer has not processed yet (pendingEventSql). So it is exact at any
 * lag: a difference without a pending event is a lie.
 */
export const NOTIFICATION_AUDIT_SQL = `
  WITH truth AS (
    SELECT source, actor, subject, recipient, type, notification_id(at, source, actor, subject, version) AS id
      FROM notification_truth WHERE active),
  view AS (SELECT source, actor, subject, recipient, type, id FROM notification WHERE active),
  diff AS (
    SELECT coalesce(t.source, v.source) AS source, coalesce(t.actor, v.actor) AS actor, coalesce(t.subject, v.subject) AS subject,
           t.source IS NULL AS extra, v.source IS NULL AS missing
      FROM truth t FULL JOIN view v
        ON v.source = t.source AND v.actor = t.actor AND v.subject = t.subject AND v.recipient = t.recipient
     WHERE t.source IS NULL OR v.source IS NULL OR t.type <> v.type OR t.id <> v.id),
  judged AS (SELECT d.extra, d.missing, ${pendingEventSql("d")} AS pending FROM diff d)
  SELECT count(*) FILTER (WHERE extra AND NOT pending)::int AS extra,
         count(*) FILTER (WHERE missing AND NOT pending)::int AS missing,
         count(*) FILTER (WHERE NOT extra AND NOT missing AND NOT pending)::int AS differing,
         (SELECT count(*) FROM notification WHERE active AND actor = recipient)::int AS self_notifications,
         count(*) FILTER (WHERE pending)::int AS explained_by_pending,
         (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM like_seq s JOIN notification_like_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN notification_relation_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM comment_seq s JOIN notification_comment_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN notification_post_watermark w USING (part))::int AS lag
    FROM judged`;

export async function auditNotifications(pool: Pool): Promise<NotificationAudit> {
  const { rows } = await pool.query<{
    extra: number;
    missing: number;
    differing: number;
    self_notifications: number;
    explained_by_pending: number;
    lag: number;
  }>(NOTIFICATION_AUDIT_SQL);
  const r = rows[0]!;
  return {
    extra: r.extra,
    missing: r.missing,
    differing: r.differing,
    selfNotifications: r.self_notifications,
    explainedByPending: r.explained_by_pending,
    lag: r.lag,
  };
}

export function notificationAuditClean(a: NotificationAudit): boolean {
  return a.extra === 0 && a.missing === 0 && a.differing === 0 && a.selfNotifications === 0;
}

export function formatNotificationAudit(a: NotificationAudit): string {
  return `extra=${a.extra} missing=${a.missing} differing=${a.differing} self=${a.selfNotifications} pending=${a.explainedByPending} lag=${a.lag}`;
}

export interface NotificationWatermark {
  source: "likes" | "relations" | "comments" | "posts";
  part: number;
  last: number;
  appliedUpto: number;
  lag: number;
}

/** The notification view's lag: per source outbox and partition, its sequence and the view's contiguous watermark. */
export async function readNotificationWatermarks(pool: Pool): Promise<NotificationWatermark[]> {
  const { rows } = await pool.query<{
    source: NotificationWatermark["source"];
    part: number;
    last: number;
    applied_upto: number;
  }>(
    `SELECT 'likes' AS source, s.part, s.last, w.applied_upto FROM like_seq s JOIN notification_like_watermark w USING (part)
     UNION ALL
     SELECT 'relations', s.part, s.last, w.applied_upto FROM event_seq s JOIN notification_relation_watermark w USING (part)
     UNION ALL
     SELECT 'comments', s.part, s.last, w.applied_upto FROM comment_seq s JOIN notification_comment_watermark w USING (part)
     UNION ALL
     SELECT 'posts', s.part, s.last, w.applied_upto FROM post_seq s JOIN notification_post_watermark w USING (part)
     ORDER BY 1, 2`,
  );
  return rows.map((r) => ({
    source: r.source,
    part: r.part,
    last: r.last,
    appliedUpto: r.applied_upto,
    lag: r.last - r.applied_upto,
  }));
}
