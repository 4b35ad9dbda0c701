import type { FastifyInstance, FastifyRequest } from "fastify";
import type { WriteLimit } from "../context.ts";
import { requireAdmin, requireCaller } from "../auth.ts";
import { notFound } from "../errors.ts";
import { bearer, countQuery, countSource, errors, idParams, likeOutcome, pageQuery } from "../schemas.ts";
import { LIKE_COUNTS } from "../../cache/counter-kinds.ts";
import { listLikers } from "../../likes/like-reads.ts";
import type { LikeResult } from "../../likes/types.ts";
import type { Ledger } from "../../ledger.ts";

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

/**
 * An item is visible when it exists and, if it is a post, the caller may read it (decided on
 * the truth: writes and exact reads should not ride on projection lag). Invisible and missing
 * look the same, so a blocked user learns nothing about the post.
 */
export async function requireVisibleItem(ledger: Ledger, callerId: string, itemId: string): Promise<void> {
  const { rows } = await ledger.pool.query<{ item: boolean; post: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM item WHERE item_id = $1) AS item, EXISTS (SELECT 1 FROM post WHERE post_id = $1) AS post",
    [itemId],
  );
  if (!rows[0]!.item) throw notFound("item");
  if (rows[0]!.post && !(await ledger.posts.canRead(callerId, itemId, "TRUTH")).allowed) throw notFound("item");
}

export async function likeRoutes(app: FastifyInstance, opts: { writeRateLimit: WriteLimit }): Promise<void> {
  const { ledger, metrics } = app;

  app.put("/v1/items/:id", {
    schema: {
      tags: ["likes"], summary: "Make an item likeable (admin)", security: bearer, params: idParams,
      response: { 200: { type: "object", properties: { id: { type: "string" } } }, ...errors(400, 401, 403) },
    },
  }, async (request: IdRequest) => {
    requireAdmin(request);
    await ledger.likes.createItem(request.params.id);
    return { id: request.params.id };
  });

  const setLike = (want: boolean) => async (request: IdRequest) => {
    const caller = requireCaller(request);
    // Retracting one's own like is always allowed: a block (or a lost follow) hides the post
    // from now on, but must not pin a like its author wants gone (docs/relations-authorization.md).
    // The library answers REJECTED for an item that does not exist, which is a 404 below.
    if (want) await requireVisibleItem(ledger, caller.id, request.params.id);
    const result: LikeResult = want
      ? await ledger.likes.like(caller.id, request.params.id)
      : await ledger.likes.unlike(caller.id, request.params.id);
    metrics.outcomes.inc({ operation: want ? "like" : "unlike", outcome: result.outcome });
    if (result.outcome === "REJECTED") throw notFound("item");
    // With no like to retract, an unlike must not tell a reader who may not see the item that it exists.
    if (!want && result.outcome === "NOOP") await requireVisibleItem(ledger, caller.id, request.params.id);
    return { outcome: result.outcome, liked: result.liked, version: result.version, seq: result.seq };
  };
  const likeSchema = (summary: string) => ({
    tags: ["likes"], summary, security: bearer, params: idParams,
    response: { 200: likeOutcome, ...errors(400, 401, 404, 429) },
  });
  app.put("/v1/items/:id/likes/me", { schema: likeSchema("Like (set-target-state: repeating is a NOOP)"), onRequest: opts.writeRateLimit }, setLike(true));
  app.delete("/v1/items/:id/likes/me", { schema: likeSchema("Unlike: always allowed for one's own like, also after a block hid the item"), onRequest: opts.writeRateLimit }, setLike(false));

  app.get("/v1/items/:id/likes/me", {
    schema: {
      tags: ["likes"], summary: "Whether I like the item, from the facts (read-your-writes)", security: bearer, params: idParams,
      response: { 200: { type: "object", properties: { liked: { type: "boolean" }, version: { type: "integer" } } }, ...errors(400, 401, 404) },
    },
  }, async (request: IdRequest) => {
    const caller = requireCaller(request);
    await requireVisibleItem(ledger, caller.id, request.params.id);
    return ledger.likes.hasLiked(caller.id, request.params.id);
  });

  app.get("/v1/items/:id/like-count", {
    schema: {
      tags: ["likes"], summary: "Like count with its lag and error bound: |count - truth| <= pendingForItem",
      security: bearer, params: idParams, querystring: countQuery,
      response: {
        200: {
          type: "object",
          properties: { count: { type: "integer" }, lag: { type: "integer" }, pendingForItem: { type: "integer" }, stale: { type: "boolean" }, ...countSource },
        },
        ...errors(400, 401, 404),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>) => {
    const caller = requireCaller(request);
    await requireVisibleItem(ledger, caller.id, request.params.id);
    return app.counts.read(LIKE_COUNTS, request.params.id, request.query);
  });

  app.get("/v1/items/:id/likes", {
    schema: {
      tags: ["likes"], summary: "Who likes the item, newest first (opaque cursor)", security: bearer, params: idParams, querystring: pageQuery,
      response: {
        200: {
          type: "object",
          properties: {
            likers: { type: "array", items: { type: "object", properties: { userId: { type: "string" }, likedAt: { type: "string", format: "date-time" } } } },
            nextCursor: { type: "string" },
          },
        },
        ...errors(400, 401, 404),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { limit: number; cursor?: string } }>) => {
    const caller = requireCaller(request);
    await requireVisibleItem(ledger, caller.id, request.params.id);
    return listLikers(ledger.pool, request.params.id, request.query);
  });
}
