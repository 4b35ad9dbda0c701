import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller } from "../auth.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import { bearer, errors, named, pageQuery, post } from "../schemas.ts";
import { readHomeTimeline } from "../../feed/feed-reads.ts";
import { decodeCursor } from "../../pagination.ts";
import { postJson } from "./posts.ts";

const timelineEntry = named("TimelineEntry", {
  type: "object",
  required: ["post", "likes", "comments", "likedByMe"],
  properties: {
    post,
    likes: { type: "integer", description: "the post's like count, as GET /v1/items/{id}/likes counts it" },
    comments: { type: "integer", description: "the post's comment count" },
    likedByMe: { type: "boolean", description: "whether the caller likes the post" },
  },
});

const homePage = named("HomeTimelinePage", {
  type: "object",
  required: ["entries", "lag", "complete"],
  properties: {
    entries: { type: "array", items: timelineEntry },
    lag: {
      type: "integer",
      description:
        "post and relation events committed but not yet applied to the caller's inbox that could change this page (0: the page is as fresh as the facts)",
    },
    complete: {
      type: "boolean",
      description:
        "false (status 206, with Retry-After) while the inbox of a reader returning after LEDGER_FEED_ABSENT_MS is still being installed: the entries are what the inbox holds so far, fewer than the truth may give; true (status 200) otherwise",
    },
    nextCursor: { type: "string", description: "the cursor of the next page; absent on the last page" },
  },
});

/** The caller's home timeline (docs/feed.md): only ever the caller's own, decided from the token. */
export async function timelineRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger } = app;

  app.get(
    "/v1/timelines/home",
    {
      onRequest: opts.readRateLimit,
      schema: {
        tags: ["timelines"],
        summary:
          "My home timeline: the posts of the accounts I follow and my own, newest first, each checked at read time as GET /v1/posts/{id} checks it (cursor in the body and in Link rel=next)",
        security: bearer,
        querystring: pageQuery,
        response: { 200: homePage, 206: homePage, ...errors(400, 401, 429) },
      },
    },
    async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
      const caller = requireCaller(request);
      const options = pageOptions(request.query);
      // A bad cursor is refused before the read writes anything.
      if (options.cursor !== undefined) decodeCursor(options.cursor);
      // A reader fan-out skipped gets its inbox installed first (bounded); past the bound the page says it is incomplete.
      const returned = await ledger.feedAbsence.returnReader(caller.id);
      const page = await readHomeTimeline(ledger.pool, caller.id, options);
      if (!returned.complete)
        void reply.code(206).header("retry-after", String(Math.max(1, Math.ceil(returned.retryAfterMs / 1000))));
      return sendPage(
        request,
        reply,
        {
          entries: page.entries.map((e) => ({
            post: postJson(e.post),
            likes: e.likes,
            comments: e.comments,
            likedByMe: e.likedByMe,
          })),
          lag: page.lag,
          complete: returned.complete,
          ...(page.nextCursor === undefined ? {} : { nextCursor: page.nextCursor }),
        },
        request.query,
      );
    },
  );
}
