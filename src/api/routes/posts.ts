import type { FastifyInstance, FastifyRequest } from "fastify";
import type { WriteLimit } from "../context.ts";
import { requireCaller } from "../auth.ts";
import { notFound } from "../errors.ts";
import { bearer, errors, idParams, post, postBody } from "../schemas.ts";
import type { Post } from "../../relations/posts.ts";
import type { ReadMode, Visibility } from "../../relations/types.ts";

/**
 * The modes a reader may ask for. content_token is the default and the weakest offered;
 * PROJECTION_ONLY is deliberately absent: a blocked reader would simply pick it.
 */
const CONSISTENCY: Record<string, ReadMode> = { content_token: "CONTENT_TOKEN", fresh_token: "FRESH_TOKEN", truth: "TRUTH" };

function toJson(p: Post) {
  return { id: p.postId, author: p.author, visibility: p.visibility, body: p.body, aclToken: p.aclToken, createdAt: p.createdAt.toISOString() };
}

export async function postRoutes(app: FastifyInstance, opts: { writeRateLimit: WriteLimit }): Promise<void> {
  const { ledger, metrics } = app;

  app.post("/v1/posts", {
    schema: { tags: ["posts"], summary: "Create a post (also a likeable item)", security: bearer, body: postBody, response: { 201: post, ...errors(400, 401, 404, 429) } },
    onRequest: opts.writeRateLimit,
  }, async (request: FastifyRequest<{ Body: { visibility: Visibility; body: string } }>, reply) => {
    const caller = requireCaller(request);
    const created = await ledger.posts.createPost(caller.id, request.body.visibility, request.body.body);
    metrics.outcomes.inc({ operation: "post", outcome: "CHANGED" });
    return reply.status(201).send(toJson(created));
  });

  app.get("/v1/posts/:id", {
    schema: {
      tags: ["posts"], summary: "Read a post; 404 when it is missing or the reader may not see it", security: bearer, params: idParams,
      querystring: {
        type: "object", additionalProperties: false,
        properties: { consistency: { type: "string", enum: Object.keys(CONSISTENCY), default: "content_token" } },
      },
      response: {
        200: { type: "object", properties: { post, decidedBy: { type: "string", enum: ["author", "truth", "projection", "fallback-truth", "public-block-check"] } } },
        ...errors(400, 401, 404),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { consistency: string } }>) => {
    const caller = requireCaller(request);
    const mode = CONSISTENCY[request.query.consistency]!;
    const { rows } = await ledger.pool.query<{ exists: boolean }>("SELECT EXISTS (SELECT 1 FROM post WHERE post_id = $1) AS exists", [request.params.id]);
    if (!rows[0]!.exists) throw notFound("post");
    const decision = await ledger.posts.canRead(caller.id, request.params.id, mode);
    if (!decision.allowed) throw notFound("post");
    return { post: toJson(await ledger.posts.getPost(request.params.id)), decidedBy: decision.source };
  });
}
