import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller } from "../auth.ts";
import { forbidden, notFound } from "../errors.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import {
  bearer,
  errors,
  idParams,
  named,
  namedWriteAnswer,
  optionalBearer,
  pageOf,
  pageQuery,
  post,
  postBody,
} from "../schemas.ts";
import { readAuthorPosts, type PostEntry } from "../../content/author-posts.ts";
import { readLivePost, type Post } from "../../content/posts.ts";
import { readAccount } from "../../relations/relation-reads.ts";
import { blockedEitherWay } from "../../relations/relation-service.ts";
import type { ReadMode, Visibility } from "../../content/post-types.ts";
import type { Pool } from "../../db/pool.ts";

/**
 * The modes a reader may ask for. content_token is the default and the weakest offered;
 * PROJECTION_ONLY is deliberately absent: a blocked reader would simply pick it.
 */
const CONSISTENCY: Record<string, ReadMode> = {
  content_token: "CONTENT_TOKEN",
  fresh_token: "FRESH_TOKEN",
  truth: "TRUTH",
};

/**
 * What a client without a token may read of a post: a live PUBLIC one (there is nobody to check
 * blocks or follows for), else undefined. Comments of a post are read by the same rule.
 */
export async function readPublicPost(db: Pool, postId: string): Promise<Post | undefined> {
  const found = await readLivePost(db, postId);
  return found?.visibility === "PUBLIC" ? found : undefined;
}

const postRead = named("PostRead", {
  type: "object",
  required: ["post", "decidedBy"],
  properties: {
    post,
    decidedBy: {
      type: "string",
      enum: ["author", "truth", "projection", "fallback-truth", "public-block-check", "public"],
      description:
        "what allowed the read: the author; the relation table (truth); the follower projection; the truth because the projection was behind (fallback-truth); a PUBLIC post's block check; a PUBLIC post read without a token",
    },
  },
});

const postDeletion = namedWriteAnswer("PostDeletion", {
  type: "object",
  required: ["id", "outcome"],
  properties: { id: { type: "string" }, outcome: { type: "string", enum: ["CHANGED", "NOOP"] } },
});

const postEntryPage = pageOf(
  "PostEntryPage",
  "posts",
  named("PostEntry", {
    type: "object",
    required: ["post", "likeCount", "commentCount", "liked"],
    properties: {
      post,
      likeCount: {
        type: "integer",
        description: "the derived like count: may lag the likes by the consumer's backlog",
      },
      commentCount: {
        type: "integer",
        description: "the derived comment count: may lag the comments by the consumer's backlog",
      },
      liked: { type: "boolean", description: "the caller likes the post, from the facts (false without a token)" },
    },
  }),
);

function entryJson(e: PostEntry) {
  return {
    post: {
      id: e.postId,
      author: e.author,
      visibility: e.visibility,
      body: e.body,
      aclToken: e.aclToken,
      createdAt: e.createdAt.toISOString(),
    },
    likeCount: e.likeCount,
    commentCount: e.commentCount,
    liked: e.liked,
  };
}

/** A post as GET /v1/posts/{id} shows it (also each home timeline entry). */
export function postJson(p: Post) {
  return {
    id: p.postId,
    author: p.author,
    visibility: p.visibility,
    body: p.body,
    aclToken: p.aclToken,
    createdAt: p.createdAt.toISOString(),
  };
}

export async function postRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger, metrics } = app;

  app.post(
    "/v1/posts",
    {
      schema: {
        tags: ["posts"],
        summary: "Create a post (also a likeable item)",
        security: bearer,
        body: postBody,
        response: { 201: post, ...errors(400, 401, 404, 410, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Body: { visibility: Visibility; body: string } }>, reply) => {
      const caller = requireCaller(request);
      const created = await ledger.posts.createPost(caller.id, request.body.visibility, request.body.body, {
        ensureAuthor: true,
      });
      metrics.outcomes.inc({ operation: "post", outcome: "CHANGED" });
      return reply.status(201).send(postJson(created));
    },
  );

  app.get(
    "/v1/posts/:id",
    {
      config: { auth: "optional", replicaRead: true },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["posts"],
        summary:
          "Read a post; 404 when it is missing, deleted or the reader may not see it (no token: PUBLIC posts only)",
        security: optionalBearer,
        params: idParams,
        querystring: {
          type: "object",
          additionalProperties: false,
          properties: {
            consistency: {
              type: "string",
              enum: Object.keys(CONSISTENCY),
              default: "content_token",
              description:
                "how a FOLLOWERS post's follow is checked. content_token (default): the follower projection, if it has applied the post's acl_token, else the truth; " +
                "a block or unfollow committed before the post was created is always seen (no new-enemy read), but an unfollowed reader can still read OLDER followers-only " +
                "posts for up to the projector's lag (the revocation window). fresh_token: the projection only if it has caught up with every relation event so far, else the " +
                "truth (closes the window at the cost of more truth reads). truth: always the relation table (exact, the most expensive).",
            },
          },
        },
        response: {
          200: postRead,
          ...errors(400, 401, 404, 429),
        },
      },
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: { consistency: string } }>) => {
      const mode = CONSISTENCY[request.query.consistency]!;
      if (!request.caller) {
        // Without a token there is nobody to check blocks or follows for: PUBLIC posts only, the
        // one post read that may come from a replica (it decides nothing about anyone).
        const found = await app.readFrom(request, (pool) => readPublicPost(pool, request.params.id));
        if (!found) throw notFound("post");
        return { post: postJson(found), decidedBy: "public" };
      }
      const { rows } = await ledger.pool.query<{ visibility: Visibility }>(
        "SELECT visibility FROM post WHERE post_id = $1 AND deleted_at IS NULL",
        [request.params.id],
      );
      if (!rows[0]) throw notFound("post");
      const decision = await ledger.posts.canRead(request.caller.id, request.params.id, mode);
      if (!decision.allowed) throw notFound("post");
      return { post: postJson(await ledger.posts.getPost(request.params.id)), decidedBy: decision.source };
    },
  );

  app.get(
    "/v1/accounts/:id/posts",
    {
      config: { auth: "optional" },
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["posts"],
        summary:
          "An account's posts that the caller may read, newest first, each with its like and comment counts and whether the caller likes it (cursor in the body and in Link rel=next; no token: PUBLIC posts); 404 when the account is missing or in a block with the caller",
        security: optionalBearer,
        params: idParams,
        querystring: pageQuery,
        response: { 200: postEntryPage, ...errors(400, 401, 404, 429) },
      },
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: PageQuery }>, reply) => {
      const reader = request.caller?.id ?? null;
      const author = request.params.id === "me" ? requireCaller(request).id : request.params.id;
      // As the profile: a missing account and one in a block with the caller are the same 404.
      // Each post is still judged in the page's own statement, so a block committed after this
      // check hides its posts too.
      if (
        !(await readAccount(ledger.pool, author)) ||
        (reader !== null && reader !== author && (await blockedEitherWay(ledger.pool, reader, author)))
      )
        throw notFound("account");
      const page = await readAuthorPosts(ledger.pool, reader, [author], pageOptions(request.query));
      return sendPage(request, reply, { ...page, posts: page.posts.map(entryJson) }, request.query);
    },
  );

  app.delete(
    "/v1/posts/:id",
    {
      schema: {
        tags: ["posts"],
        summary:
          "Delete my post (an admin: anyone's). Its likes stay in the ledger but the post and its item are gone for every reader; repeating is a NOOP",
        security: bearer,
        params: idParams,
        response: { 200: postDeletion, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string } }>) => {
      const caller = requireCaller(request);
      const { rows } = await ledger.pool.query<{ author: string; deleted: boolean }>(
        "SELECT author, deleted_at IS NOT NULL AS deleted FROM post WHERE post_id = $1",
        [request.params.id],
      );
      const found = rows[0];
      // Someone else's post: 403 when they may read it, the same 404 as a missing post otherwise.
      if (
        !found ||
        (found.author !== caller.id &&
          !caller.admin &&
          (found.deleted || !(await ledger.posts.canRead(caller.id, request.params.id, "TRUTH")).allowed))
      ) {
        throw notFound("post");
      }
      if (found.author !== caller.id && !caller.admin) throw forbidden("only the author deletes a post");
      const { outcome } = await ledger.posts.deletePost(found.author, request.params.id);
      metrics.outcomes.inc({ operation: "delete-post", outcome });
      return { id: request.params.id, outcome };
    },
  );
}
