import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller } from "../auth.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import { bearer, errors, named, namedWriteAnswer, pageOf, pageQuery } from "../schemas.ts";
import {
  listNotificationGroups,
  markRead,
  NOTIFICATION_ID_PATTERN,
  NOTIFICATION_TYPES,
  SAMPLE_ACCOUNTS,
  unreadCount,
} from "../../notifications/notification-reads.ts";

const notificationId = { type: "string", pattern: NOTIFICATION_ID_PATTERN.source } as const;

const groupPage = pageOf(
  "NotificationGroupPage",
  "groups",
  named("NotificationGroup", {
    type: "object",
    required: [
      "groupKey",
      "type",
      "notificationsCount",
      "sampleAccountIds",
      "mostRecentNotificationId",
      "oldestNotificationId",
      "latestNotificationAt",
      "oldestNotificationAt",
      "unread",
    ],
    properties: {
      groupKey: {
        type: "string",
        description:
          "likes of one item, and follows, share a key per 12-hour UTC window; every other notification has a key of its own",
      },
      type: { type: "string", enum: [...NOTIFICATION_TYPES] },
      itemId: {
        type: "string",
        description:
          "the liked post or comment, the comment (types comment and reply), or the post or comment that mentions the caller (type mention); absent for follows and requests",
      },
      postId: {
        type: "string",
        description: "the post of itemId (itemId itself when it is a post); present exactly when itemId is",
      },
      notificationsCount: {
        type: "integer",
        description:
          "exactly the group's notifications the caller may see (accounts blocked either way are not counted)",
      },
      sampleAccountIds: {
        type: "array",
        items: { type: "string" },
        maxItems: SAMPLE_ACCOUNTS,
        description: `the latest accounts, newest first (at most ${SAMPLE_ACCOUNTS})`,
      },
      mostRecentNotificationId: {
        type: "string",
        description: "pass it to POST /v1/notifications/read to mark the group and everything older read",
      },
      oldestNotificationId: { type: "string" },
      latestNotificationAt: { type: "string", format: "date-time" },
      oldestNotificationAt: { type: "string", format: "date-time" },
      unread: { type: "boolean", description: "the group holds a notification newer than the caller's marker" },
    },
  }),
);

const unreadFields = {
  type: "object",
  required: ["count", "groups", "lastReadId"],
  properties: {
    count: { type: "integer", description: "visible notifications newer than the marker" },
    groups: { type: "integer", description: "groups that hold at least one of them" },
    lastReadId: { type: ["string", "null"], description: "the marker: the newest notification id read" },
  },
};
const unread = named("NotificationUnreadCount", unreadFields);
const marker = namedWriteAnswer("NotificationMarker", unreadFields);

const markReadBody = named("NotificationMarkRead", {
  type: "object",
  required: ["upTo"],
  additionalProperties: false,
  properties: {
    upTo: {
      ...notificationId,
      description: "a notification id (mostRecentNotificationId of a group): it and everything older are read",
    },
  },
});

/** The caller's notifications (docs/notifications.md): only ever the caller's own, decided from the token. */
export async function notificationRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger } = app;

  app.get(
    "/v1/notifications",
    {
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["notifications"],
        summary:
          "My notifications, grouped (likes of an item and follows per 12-hour window), newest group first (cursor in the body and in Link rel=next)",
        security: bearer,
        querystring: pageQuery,
        response: { 200: groupPage, ...errors(400, 401, 429) },
      },
    },
    async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
      const caller = requireCaller(request);
      return sendPage(
        request,
        reply,
        await listNotificationGroups(ledger.pool, caller.id, pageOptions(request.query)),
        request.query,
      );
    },
  );

  app.get(
    "/v1/notifications/unread-count",
    {
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["notifications"],
        summary: "How many of my visible notifications are newer than my marker",
        security: bearer,
        response: { 200: unread, ...errors(401, 429) },
      },
    },
    async (request) => unreadCount(ledger.pool, requireCaller(request).id),
  );

  app.post(
    "/v1/notifications/read",
    {
      onRequest: opts.writeRateLimit,
      schema: {
        tags: ["notifications"],
        summary:
          "Move my marker to a notification id (never backwards, never past my newest notification); answers the unread count after it",
        security: bearer,
        body: markReadBody,
        response: { 200: marker, ...errors(400, 401, 429) },
      },
    },
    async (request: FastifyRequest<{ Body: { upTo: string } }>) =>
      markRead(ledger.pool, requireCaller(request).id, request.body.upTo),
  );
}
