import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller, type Caller } from "../auth.ts";
import { notFound } from "../errors.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import {
  bearer,
  countQuery,
  countSource,
  errors,
  id,
  idParams,
  named,
  namedWriteAnswer,
  optionalBearer,
  pageQuery,
} from "../schemas.ts";
import { readPublicPost } from "./posts.ts";
import { COMMENT_COUNTS } from "../../cache/counter-kinds.ts";
import {
  MAX_COMMENT_LENGTH,
  MAX_IDEMPOTENCY_KEY_LENGTH,
  type Comment,
  type CommentOrder,
} from "../../content/comments.ts";
import type { Ledger } from "../../ledger.ts";
import type { ReadMode } from "../../content/post-types.ts";

/** As for posts: content_token by default; PROJECTION_ONLY is not offered (a blocked reader would pick it). */
const CONSISTENCY: Record<string, ReadMode> = {
  content_token: "CONTENT_TOKEN",
  fresh_token: "FRESH_TOKEN",
  truth: "TRUTH",
};

const comment = namedWriteAnswer("Comment", {
  type: "object",
  required: ["id", "postId", "parentId", "depth", "author", "body", "deleted", "editCount", "createdAt", "replyCount"],
  properties: {
    id: { type: "string" },
    postId: { type: "string" },
    parentId: { type: "string", nullable: true },
    depth: { type: "integer" },
    author: { type: "string", nullable: true },
    body: { type: "string", nullable: true },
    deleted: { type: "boolean" },
    editCount: { type: "integer" },
    createdAt: { type: "string", format: "date-time" },
    editedAt: { type: "string", format: "date-time", nullable: true },
    replyCount: { type: "integer" },
  },
});

const commentPage = named("CommentPage", {
  type: "object",
  required: ["comments"],
  properties: {
    comments: { type: "array", items: comment },
    nextCursor: { type: "string", description: "the cursor of the next page; absent on the last page" },
  },
});

const commentDraft = named("CommentDraft", {
  type: "object",
  required: ["body"],
  additionalProperties: false,
  properties: {
    body: { type: "string", minLength: 1, maxLength: MAX_COMMENT_LENGTH },
    parentId: { ...id, description: "the comment this one replies to" },
    idempotencyKey: { type: "string", minLength: 1, maxLength: MAX_IDEMPOTENCY_KEY_LENGTH },
  },
});

const commentDeletion = namedWriteAnswer("CommentDeletion", {
  type: "object",
  required: ["outcome", "comment"],
  properties: { outcome: { type: "string", enum: ["CHANGED", "NOOP"] }, comment },
});

const commentCount = named("CommentCount", {
  type: "object",
  required: ["count", "source"],
  properties: {
    count: { type: "integer" },
    lag: { type: "integer", description: "present when source is database" },
    pendingForPost: { type: "integer", description: "present when source is database: the exact error bound" },
    stale: { type: "boolean", description: "present when source is database" },
    ...countSource,
  },
});

const consistency = { type: "string", enum: Object.keys(CONSISTENCY), default: "content_token" } as const;
/** As on every list: a limit above 200 is clamped, and the next page is in the body and in Link. */
const limitAndCursor = pageQuery.properties;

const bodyOnly = named("CommentEdit", {
  type: "object",
  required: ["body"],
  additionalProperties: false,
  properties: { body: { type: "string", minLength: 1, maxLength: MAX_COMMENT_LENGTH } },
});

function toJson(c: Comment) {
  return { ...c, createdAt: c.createdAt.toISOString(), editedAt: c.editedAt?.toISOString() ?? null };
}

/** Missing and not visible are the same 404, as on the post routes; without a token, PUBLIC posts only (as GET /v1/posts/{id}). */
async function requireReadablePost(
  ledger: Ledger,
  reader: Caller | null,
  postId: string,
  mode: ReadMode,
): Promise<void> {
  if (!reader) {
    if (!(await readPublicPost(ledger.pool, postId))) throw notFound("post");
    return;
  }
  const { rows } = await ledger.pool.query<{ exists: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM post WHERE post_id = $1) AS exists",
    [postId],
  );
  if (!rows[0]!.exists) throw notFound("post");
  if (!(await ledger.posts.canRead(reader.id, postId, mode)).allowed) throw notFound("post");
}

export async function commentRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger, metrics } = app;

  app.post(
    "/v1/posts/:id/comments",
    {
      schema: {
        tags: ["comments"],
        summary:
          "Comment on a post, or reply to a comment (parentId); a retried idempotencyKey returns the first comment",
        security: bearer,
        params: idParams,
        body: commentDraft,
        response: { 201: comment, ...errors(400, 401, 404, 409, 410, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (
      request: FastifyRequest<{
        Params: { id: string };
        Body: { body: string; parentId?: string; idempotencyKey?: string };
      }>,
      reply,
    ) => {
      const caller = requireCaller(request);
      const { body, parentId, idempotencyKey } = request.body;
      const created = await ledger.comments.create(caller.id, request.params.id, body, {
        ...(parentId !== undefined ? { parentId } : {}),
        ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
        ensureAuthor: true,
      });
      metrics.outcomes.inc({ operation: "comment", outcome: created.created ? "CHANGED" : "NOOP" });
      return reply.status(201).send(toJson(created));
    },
  );

  app.get(
    "/v1/posts/:id/comments",
    {
      config: { auth: "optional" },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["comments"],
        summary:
          "Top-level comments with their reply counts (cursor in the body and in Link rel=next); 404 when the post is missing or not visible (no token: PUBLIC posts)",
        security: optionalBearer,
        params: idParams,
        querystring: {
          type: "object",
          additionalProperties: false,
          properties: {
            order: { type: "string", enum: ["newest", "oldest"], default: "newest" },
            ...limitAndCursor,
            consistency,
          },
        },
        response: { 200: commentPage, ...errors(400, 401, 404, 429) },
      },
    },
    async (
      request: FastifyRequest<{
        Params: { id: string };
        Querystring: PageQuery & { order: CommentOrder; consistency: string };
      }>,
      reply,
    ) => {
      const reader = request.caller;
      const mode = CONSISTENCY[request.query.consistency]!;
      await requireReadablePost(ledger, reader, request.params.id, mode);
      const page = await ledger.comments.listTopLevel(reader?.id ?? null, request.params.id, {
        order: request.query.order,
        mode,
        ...pageOptions(request.query),
      });
      return sendPage(request, reply, { ...page, comments: page.comments.map(toJson) }, request.query);
    },
  );

  app.get(
    "/v1/comments/:id/replies",
    {
      config: { auth: "optional" },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["comments"],
        summary:
          "A comment's direct replies, oldest first (cursor in the body and in Link rel=next; no token: comments of PUBLIC posts)",
        security: optionalBearer,
        params: idParams,
        querystring: { type: "object", additionalProperties: false, properties: { ...limitAndCursor, consistency } },
        response: { 200: commentPage, ...errors(400, 401, 404, 429) },
      },
    },
    async (
      request: FastifyRequest<{ Params: { id: string }; Querystring: PageQuery & { consistency: string } }>,
      reply,
    ) => {
      const reader = request.caller;
      const mode = CONSISTENCY[request.query.consistency]!;
      const postId = await ledger.comments.postOfVisibleComment(reader?.id ?? null, request.params.id);
      const readable = reader
        ? (await ledger.posts.canRead(reader.id, postId, mode)).allowed
        : (await readPublicPost(ledger.pool, postId)) !== undefined;
      if (!readable) throw notFound("comment");
      const page = await ledger.comments.listReplies(reader?.id ?? null, request.params.id, {
        mode,
        ...pageOptions(request.query),
      });
      return sendPage(request, reply, { ...page, comments: page.comments.map(toJson) }, request.query);
    },
  );

  app.get(
    "/v1/comments/:id",
    {
      config: { auth: "optional" },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["comments"],
        summary:
          "One comment as it is listed under its post; 404 when it is missing or the caller may not read it or its post (no token: comments of PUBLIC posts)",
        security: optionalBearer,
        params: idParams,
        querystring: { type: "object", additionalProperties: false, properties: { consistency } },
        response: { 200: comment, ...errors(400, 401, 404, 429) },
      },
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: { consistency: string } }>) => {
      const reader = request.caller;
      const mode = CONSISTENCY[request.query.consistency]!;
      const postId = await ledger.comments.postOfVisibleComment(reader?.id ?? null, request.params.id);
      const readable = reader
        ? (await ledger.posts.canRead(reader.id, postId, mode)).allowed
        : (await readPublicPost(ledger.pool, postId)) !== undefined;
      if (!readable) throw notFound("comment");
      return toJson(await ledger.comments.readVisible(reader?.id ?? null, request.params.id, { mode }));
    },
  );

  app.patch(
    "/v1/comments/:id",
    {
      schema: {
        tags: ["comments"],
        summary: "Edit a comment's body (author only; counts edits)",
        security: bearer,
        params: idParams,
        body: bodyOnly,
        response: { 200: comment, ...errors(400, 401, 403, 404, 409, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string }; Body: { body: string } }>) => {
      const caller = requireCaller(request);
      return toJson(await ledger.comments.edit(caller.id, request.params.id, request.body.body));
    },
  );

  app.delete(
    "/v1/comments/:id",
    {
      schema: {
        tags: ["comments"],
        summary: "Delete a comment as a tombstone (its author or the post's author); repeating is a NOOP",
        security: bearer,
        params: idParams,
        response: {
          200: commentDeletion,
          ...errors(400, 401, 403, 404, 429),
        },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string } }>) => {
      const caller = requireCaller(request);
      const result = await ledger.comments.delete(caller.id, request.params.id);
      metrics.outcomes.inc({ operation: "uncomment", outcome: result.outcome });
      return { outcome: result.outcome, comment: toJson(result.comment) };
    },
  );

  app.get(
    "/v1/posts/:id/comment-count",
    {
      config: { auth: "optional", replicaRead: true },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["comments"],
        summary:
          "Comment count with its lag and error bound: |count - truth| <= pendingForPost (from the Redis count layer when REDIS_URL is set; no token: PUBLIC posts)",
        security: optionalBearer,
        params: idParams,
        querystring: countQuery,
        response: {
          200: commentCount,
          ...errors(400, 401, 404, 429),
        },
      },
    },
    async (
      request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>,
    ) => {
      await requireReadablePost(ledger, request.caller, request.params.id, "CONTENT_TOKEN");
      return app.readFrom(request, (pool) => app.counts.read(COMMENT_COUNTS, request.params.id, request.query, pool));
    },
  );
}
