import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireAdmin, requireCaller, type Caller } from "../auth.ts";
import { notFound } from "../errors.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import { bearer, countFields, countQuery, countSource, errors, idParams, likeOutcome, optionalBearer, pageOf, pageQuery } from "../schemas.ts";
import { listLikedItems, listLikers } from "../../likes/like-reads.ts";
import { LIKE_COUNTS } from "../../cache/counter-kinds.ts";
import type { LikeResult } from "../../likes/types.ts";
import type { Ledger } from "../../ledger.ts";

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

/**
 * An item is visible when it exists and, if it is a post, it is not deleted and the caller may
 * read it (decided on the truth: writes and exact reads should not ride on projection lag);
 * without a token only items that are no post and PUBLIC posts are. Invisible and missing look
 * the same, so a blocked user learns nothing about the post.
 */
export async function requireVisibleItem(ledger: Ledger, caller: Caller | null, itemId: string): Promise<void> {
  const visibility = await requireLiveItem(ledger, itemId);
  if (visibility === null) return;
  const allowed = caller ? (await ledger.posts.canRead(caller.id, itemId, "TRUTH")).allowed : visibility === "PUBLIC";
  if (!allowed) throw notFound("item");
}

/** The item exists and is not a deleted post (gone for everyone); answers the post's visibility, or null for an item that is no post. */
async function requireLiveItem(ledger: Ledger, itemId: string): Promise<string | null> {
  // Named: on every like request, so parsed and planned once per connection.
  const { rows } = await ledger.pool.query<{ item: boolean; visibility: string | null; deleted: boolean | null }>({
    name: "like_live_item",
    text: `SELECT EXISTS (SELECT 1 FROM item WHERE item_id = $1) AS item,
                  (SELECT visibility FROM post WHERE post_id = $1) AS visibility,
                  (SELECT deleted_at IS NOT NULL FROM post WHERE post_id = $1) AS deleted`,
    values: [itemId],
  });
  const { item, visibility, deleted } = rows[0]!;
  if (!item || deleted === true) throw notFound("item");
  return visibility;
}

export async function likeRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger, metrics } = app;

  app.put("/v1/items/:id", {
    schema: {
      tags: ["likes"], summary: "Make an item likeable (admin)", security: bearer, params: idParams,
      response: { 200: { type: "object", properties: { id: { type: "string" } } }, ...errors(400, 401, 403, 429) },
    },
    onRequest: opts.writeRateLimit,
  }, async (request: IdRequest) => {
    requireAdmin(request);
    await ledger.likes.createItem(request.params.id);
    return { id: request.params.id };
  });

  const setLike = (want: boolean) => async (request: IdRequest) => {
    const caller = requireCaller(request);
    // An item that is no post is everybody's to see: checked and written in one statement
    // (docs/write-path.md). A post takes the checked path below.
    let result: LikeResult | undefined = await ledger.likes.setLikedUnlessPost(caller.id, request.params.id, want);
    const post = result === undefined;
    if (result === undefined) {
      // Retracting one's own like is always allowed: a block (or a lost follow) hides the post
      // from now on, but must not pin a like its author wants gone (docs/relations-authorization.md).
      if (want) await requireVisibleItem(ledger, caller, request.params.id);
      else await requireLiveItem(ledger, request.params.id);
      result = want
        ? await ledger.likes.like(caller.id, request.params.id)
        : await ledger.likes.unlike(caller.id, request.params.id);
    }
    metrics.outcomes.inc({ operation: want ? "like" : "unlike", outcome: result.outcome });
    // The library answers REJECTED for an item that does not exist.
    if (result.outcome === "REJECTED") throw notFound("item");
    // With no like to retract, an unlike must not tell a reader who may not see the post that it exists.
    if (post && !want && result.outcome === "NOOP") await requireVisibleItem(ledger, caller, request.params.id);
    return { outcome: result.outcome, liked: result.liked, version: result.version, seq: result.seq };
  };
  const likeSchema = (summary: string) => ({
    tags: ["likes"], summary, security: bearer, params: idParams,
    response: { 200: likeOutcome, ...errors(400, 401, 404, 429) },
  });
  app.put("/v1/items/:id/likes/me", { schema: likeSchema("Like (set-target-state: repeating is a NOOP)"), onRequest: opts.writeRateLimit }, setLike(true));
  app.delete("/v1/items/:id/likes/me", { schema: likeSchema("Unlike: always allowed for one's own like, also after a block hid the item"), onRequest: opts.writeRateLimit }, setLike(false));

  app.get("/v1/items/:id/likes/me", {
    onRequest: opts.readRateLimit,
    schema: {
      tags: ["likes"], summary: "Whether I like the item, from the facts (read-your-writes)", security: bearer, params: idParams,
      response: { 200: { type: "object", properties: { liked: { type: "boolean" }, version: { type: "integer" } } }, ...errors(400, 401, 404, 429) },
    },
  }, async (request: IdRequest) => {
    const caller = requireCaller(request);
    await requireVisibleItem(ledger, caller, request.params.id);
    return ledger.likes.hasLiked(caller.id, request.params.id);
  });

  app.get("/v1/items/:id/like-count", {
    config: { auth: "optional", replicaRead: true },
    onRequest: opts.readRateLimit,
    schema: {
      tags: ["likes"], summary: "Like count with its lag and error bound: |count - truth| <= pendingForItem (no token: items that are no post, and PUBLIC posts)",
      security: optionalBearer, params: idParams, querystring: countQuery,
      response: {
        200: {
          type: "object",
          properties: { count: { type: "integer", description: "the derived like count" }, ...countFields, ...countSource },
        },
        ...errors(400, 401, 404, 429),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>) => {
    await requireVisibleItem(ledger, request.caller, request.params.id);
    return app.readFrom(request, (pool) => app.counts.read(LIKE_COUNTS, request.params.id, request.query, pool));
  });

  app.get("/v1/items/:id/likes", {
    config: { auth: "optional", replicaRead: true },
    onRequest: opts.readRateLimit,
    schema: {
      tags: ["likes"], summary: "Who likes the item, newest first (cursor in the body and in Link rel=next; no token: items that are no post, and PUBLIC posts)",
      security: optionalBearer, params: idParams, querystring: pageQuery,
      response: {
        200: pageOf("likers", { type: "object", required: ["userId", "likedAt"], properties: { userId: { type: "string" }, likedAt: { type: "string", format: "date-time" } } }),
        ...errors(400, 401, 404, 429),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: PageQuery }>, reply) => {
    await requireVisibleItem(ledger, request.caller, request.params.id);
    return sendPage(request, reply, await app.readFrom(request, (pool) => listLikers(pool, request.params.id, pageOptions(request.query))), request.query);
  });

  app.get("/v1/accounts/me/likes", {
    onRequest: opts.readRateLimit,
    schema: {
      tags: ["likes"], summary: "Items I like, newest like first, from the facts (a deleted post's item is left out)", security: bearer, querystring: pageQuery,
      response: {
        200: pageOf("likes", { type: "object", required: ["itemId", "likedAt"], properties: { itemId: { type: "string" }, likedAt: { type: "string", format: "date-time" } } }),
        ...errors(400, 401, 429),
      },
    },
  }, async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
    return sendPage(request, reply, await listLikedItems(ledger.pool, requireCaller(request).id, pageOptions(request.query)), request.query);
  });
}
