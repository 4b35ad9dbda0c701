import { auditErasure, erasureAuditClean } from "../../erasure/erasure-audit.ts";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { requireAdmin } from "../auth.ts";
import type { RateLimits } from "../context.ts";
import { readWatermarks } from "../metrics.ts";
import { bearer, errors, id, named, namedWriteAnswer } from "../schemas.ts";
import { readSide, readSideClean, writeSide, writeSideClean } from "../../likes/like-audit.ts";
import { auditRelations, projectionDiffWhenCaughtUp, relationAuditClean } from "../../relations/relation-audit.ts";
import { transactionStats } from "../../db/transaction.ts";
import { COMMENT_COUNTER } from "../../content/comment-spec.ts";
import { auditCounter, counterAuditClean } from "../../counters/counter-audit.ts";
import { recordCounterRebuildDrift, recordRebuildDrift } from "../../cache/reconciler.ts";
import type { Ledger } from "../../ledger.ts";
import {
  auditNotifications,
  notificationAuditClean,
  readNotificationWatermarks,
} from "../../notifications/notification-audit.ts";
import { auditFeed, feedAuditClean, recordFeedAudit } from "../../feed/feed-audit.ts";
import { auditWebhooks, webhookAuditClean } from "../../webhooks/webhook-audit.ts";
import { LOST_DELIVERIES_SQL } from "../../webhooks/lost-deliveries.ts";
import { erasureJson, erasureSchema } from "./erasure.ts";

/** Every invariant check of every capability, as `social-ledger audit` and GET /v1/admin/audit report them. */
export async function fullAudit(ledger: Ledger) {
  const likesWrite = await writeSide(ledger.pool);
  const likesRead = await readSide(ledger.pool);
  const relations = await auditRelations(ledger.pool);
  const comments = await auditCounter(ledger.pool, COMMENT_COUNTER);
  const diff = await projectionDiffWhenCaughtUp(ledger.pool, ledger.hooks);
  const notifications = await auditNotifications(ledger.pool);
  const webhooks = await auditWebhooks(ledger.pool);
  const erasure = await auditErasure(ledger.pool);
  const feed = await auditFeed(ledger.pool, ledger.feed.maxItems);
  // Recorded as the periodic audit's are: ledger_feed_drift_rows_total counts every run of the invariant.
  await recordFeedAudit(ledger.pool, feed, "full");
  const findings = { lostWebhookDeliveries: (await ledger.pool.query<{ n: number }>(LOST_DELIVERIES_SQL)).rows[0]!.n };
  const projectionCaughtUp = diff !== null;
  const clean =
    writeSideClean(likesWrite) &&
    readSideClean(likesRead) &&
    relationAuditClean(relations) &&
    (diff === null || Object.values(diff).every((n) => n === 0)) &&
    counterAuditClean(comments) &&
    notificationAuditClean(notifications) &&
    webhookAuditClean(webhooks) &&
    erasureAuditClean(erasure) &&
    feedAuditClean(feed);
  return {
    clean,
    likes: { writeSide: likesWrite, readSide: likesRead },
    relations: { invariants: relations, projectionCaughtUp, projectionDiff: diff },
    comments,
    notifications,
    webhooks,
    erasure,
    feed,
    findings,
  };
}

// 200 responses, so that the OpenAPI document lists them (they also serialize the replies:
// keep them complete, or mark objects additionalProperties: true).
const integer = { type: "integer" } as const;
const statusResponse = named("AdminStatus", {
  type: "object",
  required: ["partitions", "views", "transactionRetries", "erasures"],
  properties: {
    partitions: integer,
    views: {
      type: "array",
      items: named("ViewWatermark", {
        type: "object",
        required: ["view", "part", "last", "appliedUpto", "lag"],
        properties: {
          view: { type: "string", enum: ["like_count", "follower_projection", "comment_count"] },
          part: integer,
          last: integer,
          appliedUpto: integer,
          lag: integer,
        },
      }),
    },
    transactionRetries: integer,
    notifications: {
      type: "array",
      description: "the notification view's lag per source outbox and partition (docs/notifications.md)",
      items: named("NotificationWatermark", {
        type: "object",
        required: ["source", "part", "last", "appliedUpto", "lag"],
        properties: {
          source: { type: "string", enum: ["likes", "relations", "comments", "posts"] },
          part: integer,
          last: integer,
          appliedUpto: integer,
          lag: integer,
        },
      }),
    },
    erasures: {
      type: "array",
      description: "account erasures running (oldest first), then the last 20 done",
      items: erasureSchema,
    },
  },
});
const auditResponse = named("AuditReport", {
  type: "object",
  required: ["clean", "likes", "relations"],
  properties: {
    clean: { type: "boolean" },
    likes: {
      type: "object",
      description: "writeSide and readSide checks of the likes ledger",
      additionalProperties: true,
    },
    relations: {
      type: "object",
      description: "invariants, projectionCaughtUp and projectionDiff of the follow graph",
      additionalProperties: true,
    },
    comments: {
      type: "object",
      description: "invariants of comment_count against counted_comment (src/counters/counter-audit.ts)",
      additionalProperties: true,
    },
    notifications: {
      type: "object",
      description: "the notification view against the facts (src/notifications/notification-audit.ts)",
      additionalProperties: true,
    },
    webhooks: {
      type: "object",
      description:
        "delivery cursors against their outboxes and retention holds, the block outbox's sequence (src/webhooks/webhook-audit.ts)",
      additionalProperties: true,
    },
    erasure: {
      type: "object",
      description:
        "leftovers: facts still held by, and block events still naming, an erased account (src/erasure/erasure-audit.ts)",
      additionalProperties: true,
    },
    feed: {
      type: "object",
      description: "every home timeline inbox against its reader's truth (the SQL function feed_audit, docs/feed.md)",
      additionalProperties: true,
    },
    findings: {
      type: "object",
      description:
        "not violations: lostWebhookDeliveries counts messages receivers acknowledged whose event a database promotion lost (webhook_lost_delivery, docs/failover.md)",
      additionalProperties: true,
    },
  },
});
/** A rebuild's drift report, by the names of the counted key ("itemId" of likes, "postId" of comments). */
function rebuildResponse(name: string, key: string, checked: string) {
  return namedWriteAnswer(name, {
    type: "object",
    required: ["runId", "snapshotSeqs", checked, "drifted", "totalAbsDrift"],
    properties: {
      runId: integer,
      snapshotSeqs: { type: "array", items: integer },
      [checked]: integer,
      drifted: {
        type: "array",
        items: named(`${name}Drift`, {
          type: "object",
          required: [key, "oldN", "newN", "drift", "skippedPartitions"],
          properties: {
            [key]: { type: "string" },
            oldN: integer,
            newN: integer,
            drift: integer,
            skippedPartitions: { type: "array", items: integer },
          },
        }),
      },
      totalAbsDrift: integer,
    },
  });
}
const likeRebuildReport = rebuildResponse("LikeRebuildReport", "itemId", "itemsChecked");
const commentRebuildReport = rebuildResponse("CommentRebuildReport", "postId", "postsChecked");
const likeRebuildRequest = named("LikeRebuildRequest", {
  type: ["object", "null"],
  additionalProperties: false,
  properties: { items: { type: "array", items: id, maxItems: 10000 } },
});
const notificationRebuildRequest = named("NotificationRebuildRequest", {
  type: ["object", "null"],
  additionalProperties: false,
  properties: { recipients: { type: "array", items: id, maxItems: 10000 } },
});
const notificationRebuildReport = namedWriteAnswer("NotificationRebuildReport", {
  type: "object",
  required: ["runId", "snapshotSeqs", "recipientsChecked", "rowsDrifted", "rowsPending", "changed"],
  properties: {
    runId: integer,
    snapshotSeqs: {
      type: "object",
      required: ["likes", "relations", "comments", "posts"],
      properties: {
        likes: { type: "array", items: integer },
        relations: { type: "array", items: integer },
        comments: { type: "array", items: integer },
        posts: { type: "array", items: integer },
      },
    },
    recipientsChecked: integer,
    rowsDrifted: {
      type: "integer",
      description: "rows the view had wrong: changed although no event of the pair was pending",
    },
    rowsPending: { type: "integer", description: "rows changed that events not yet consumed explain (lag, not drift)" },
    changed: {
      type: "array",
      items: named("NotificationRecipientInstall", {
        type: "object",
        required: ["recipient", "rowsDrifted", "rowsPending", "rowsNewer"],
        properties: { recipient: { type: "string" }, rowsDrifted: integer, rowsPending: integer, rowsNewer: integer },
      }),
    },
  },
});
const commentRebuildRequest = named("CommentRebuildRequest", {
  type: ["object", "null"],
  additionalProperties: false,
  properties: { posts: { type: "array", items: id, maxItems: 10000 } },
});

export async function adminRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger } = app;

  app.get(
    "/v1/admin/status",
    {
      schema: {
        tags: ["admin"],
        summary: "Sequences, watermarks and lag per view and partition",
        security: bearer,
        response: { 200: statusResponse, ...errors(401, 403, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request) => {
      requireAdmin(request);
      const views = (await readWatermarks(ledger.pool)).map((w) => ({ ...w, lag: w.last - w.appliedUpto }));
      const erasures = (await ledger.erasure.list()).map(erasureJson);
      return {
        partitions: ledger.partitions,
        views,
        transactionRetries: transactionStats.retries,
        notifications: await readNotificationWatermarks(ledger.pool),
        erasures,
      };
    },
  );

  app.get(
    "/v1/admin/audit",
    {
      schema: {
        tags: ["admin"],
        summary: "Write-side and read-side invariant checks; clean=false on any violation",
        security: bearer,
        response: { 200: auditResponse, ...errors(401, 403, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request) => {
      requireAdmin(request);
      const report = await fullAudit(ledger);
      app.dashboard.recordAudit(report, "api");
      return report;
    },
  );

  app.post(
    "/v1/admin/rebuild",
    {
      schema: {
        tags: ["admin"],
        summary: "Rebuild like counts from a snapshot baseline; reports the drift it corrected",
        security: bearer,
        body: likeRebuildRequest,
        response: { 200: likeRebuildReport, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Body: { items?: string[] } | null }>) => {
      requireAdmin(request);
      const items = request.body?.items;
      const report = await ledger.likeRebuild.rebuild(items ? { items } : {});
      await recordRebuildDrift(ledger.pool, report.drifted);
      return report;
    },
  );

  app.post(
    "/v1/admin/comment-counts/rebuild",
    {
      schema: {
        tags: ["admin"],
        summary: "Rebuild comment counts from a snapshot of the counted comments; reports the drift it corrected",
        security: bearer,
        body: commentRebuildRequest,
        response: { 200: commentRebuildReport, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Body: { posts?: string[] } | null }>) => {
      requireAdmin(request);
      const posts = request.body?.posts;
      const report = await ledger.commentRebuild.rebuild(posts ? { keys: posts } : {});
      await recordCounterRebuildDrift(ledger.pool, "comments", report.drifted);
      return {
        runId: report.runId,
        snapshotSeqs: report.snapshotSeqs,
        postsChecked: report.keysChecked,
        totalAbsDrift: report.totalAbsDrift,
        drifted: report.drifted.map((d) => ({
          postId: d.key,
          oldN: d.oldN,
          newN: d.newN,
          drift: d.drift,
          skippedPartitions: d.skippedPartitions,
        })),
      };
    },
  );

  app.post(
    "/v1/admin/notifications/rebuild",
    {
      schema: {
        tags: ["admin"],
        summary:
          "Rebuild the notification view from the facts (all recipients, or the given ones), beside live consumers",
        security: bearer,
        body: notificationRebuildRequest,
        response: { 200: notificationRebuildReport, ...errors(400, 401, 403, 409, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Body: { recipients?: string[] } | null }>) => {
      requireAdmin(request);
      const recipients = request.body?.recipients;
      return ledger.notificationRebuild.rebuild(recipients ? { recipients } : {});
    },
  );
}
