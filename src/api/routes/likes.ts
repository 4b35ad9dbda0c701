import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireAdmin, requireCaller, type Caller } from "../auth.ts";
import { notFound } from "../errors.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import {
  bearer,
  countFields,
  countQuery,
  countSource,
  errors,
  idParams,
  likeOutcome,
  named,
  namedWriteAnswer,
  optionalBearer,
  pageOf,
  pageQuery,
} from "../schemas.ts";
import { listLikedItems, listLikers } from "../../likes/like-reads.ts";
import { LIKE_COUNTS } from "../../cache/counter-kinds.ts";
import { itemState } from "../../likes/item-visibility.ts";
import type { Ledger } from "../../ledger.ts";

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

const itemCreated = namedWriteAnswer("ItemCreated", {
  type: "object",
  required: ["id"],
  properties: { id: { type: "string" } },
});
const likeState = named("LikeState", {
  type: "object",
  required: ["liked", "version"],
  properties: { liked: { type: "boolean" }, version: { type: "integer" } },
});
const likeCount = named("LikeCount", {
  type: "object",
  required: ["count", "source"],
  properties: { count: { type: "integer", description: "the derived like count" }, ...countFields, ...countSource },
});
const likerPage = pageOf(
  "LikerPage",
  "likers",
  named("Liker", {
    type: "object",
    required: ["userId", "likedAt"],
    properties: { userId: { type: "string" }, likedAt: { type: "string", format: "date-time" } },
  }),
);
const likedItemPage = pageOf(
  "LikedItemPage",
  "likes",
  named("LikedItem", {
    type: "object",
    required: ["itemId", "likedAt"],
    properties: { itemId: { type: "string" }, likedAt: { type: "string", format: "date-time" } },
  }),
);

/**
 * The item as `caller` (null: no token) may see it, by the SQL function item_state (src/db/schema.sql): the rule for
 * every item kind in one place, decided in the truth (exact reads should not ride on projection
 * lag). Hidden and missing are the same 404, so the answer tells nothing about a hidden item.
 */
export async function requireVisibleItem(ledger: Ledger, caller: Caller | null, itemId: string): Promise<void> {
  if ((await itemState(ledger.pool, caller?.id ?? null, itemId)) !== "VISIBLE") throw notFound("item");
}

export async function likeRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger, metrics } = app;

  app.put(
    "/v1/items/:id",
    {
      schema: {
        tags: ["likes"],
        summary: "Make an item likeable (admin)",
        security: bearer,
        params: idParams,
        response: { 200: itemCreated, ...errors(400, 401, 403, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: IdRequest) => {
      requireAdmin(request);
      await ledger.likes.createItem(request.params.id);
      return { id: request.params.id };
    },
  );

  // Decided in the truth inside the write itself (like_set_if_visible): a hidden item is the
  // same REJECTED as a missing one, and retracting one's own like stays allowed after a block.
  const setLike = (want: boolean) => async (request: IdRequest) => {
    const caller = requireCaller(request);
    const result = await ledger.likes.setLikedIfVisible(caller.id, request.params.id, want);
    metrics.outcomes.inc({ operation: want ? "like" : "unlike", outcome: result.outcome });
    if (result.outcome === "REJECTED") throw notFound("item");
    return { outcome: result.outcome, liked: result.liked, version: result.version, seq: result.seq };
  };
  const likeSchema = (summary: string) => ({
    tags: ["likes"],
    summary,
    security: bearer,
    params: idParams,
    response: { 200: likeOutcome, ...errors(400, 401, 404, 410, 429) },
  });
  app.put(
    "/v1/items/:id/likes/me",
    { schema: likeSchema("Like (set-target-state: repeating is a NOOP)"), onRequest: opts.writeRateLimit },
    setLike(true),
  );
  app.delete(
    "/v1/items/:id/likes/me",
    {
      schema: likeSchema("Unlike: always allowed for one's own like, also after a block hid the item"),
      onRequest: opts.writeRateLimit,
    },
    setLike(false),
  );

  app.get(
    "/v1/items/:id/likes/me",
    {
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["likes"],
        summary: "Whether I like the item, from the facts (read-your-writes)",
        security: bearer,
        params: idParams,
        response: { 200: likeState, ...errors(400, 401, 404, 429) },
      },
    },
    async (request: IdRequest) => {
      const caller = requireCaller(request);
      await requireVisibleItem(ledger, caller, request.params.id);
      return ledger.likes.hasLiked(caller.id, request.params.id);
    },
  );

  app.get(
    "/v1/items/:id/like-count",
    {
      config: { auth: "optional", replicaRead: true },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["likes"],
        summary:
          "Like count with its lag and error bound: |count - truth| <= pendingForItem (no token: plain items, PUBLIC posts and their comments)",
        security: optionalBearer,
        params: idParams,
        querystring: countQuery,
        response: {
          200: likeCount,
          ...errors(400, 401, 404, 429),
        },
      },
    },
    async (
      request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>,
    ) => {
      await requireVisibleItem(ledger, request.caller, request.params.id);
      return app.readFrom(request, (pool) => app.counts.read(LIKE_COUNTS, request.params.id, request.query, pool));
    },
  );

  app.get(
    "/v1/items/:id/likes",
    {
      config: { auth: "optional", replicaRead: true },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["likes"],
        summary:
          "Who likes the item, newest first, without accounts in a block with the caller (cursor in the body and in Link rel=next; no token: plain items, PUBLIC posts and their comments)",
        security: optionalBearer,
        params: idParams,
        querystring: pageQuery,
        response: {
          200: likerPage,
          ...errors(400, 401, 404, 429),
        },
      },
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: PageQuery }>, reply) => {
      await requireVisibleItem(ledger, request.caller, request.params.id);
      return sendPage(
        request,
        reply,
        await app.readFrom(request, (pool) =>
          listLikers(pool, request.params.id, { ...pageOptions(request.query), viewer: request.caller?.id ?? null }),
        ),
        request.query,
      );
    },
  );

  app.get(
    "/v1/accounts/me/likes",
    {
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["likes"],
        summary: "Items I like, newest like first, from the facts (an item deleted for everyone is left out)",
        security: bearer,
        querystring: pageQuery,
        response: {
          200: likedItemPage,
          ...errors(400, 401, 429),
        },
      },
    },
    async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
      return sendPage(
        request,
        reply,
        await listLikedItems(ledger.pool, requireCaller(request).id, pageOptions(request.query)),
        request.query,
      );
    },
  );
}
