import type { FastifyReply, FastifyRequest } from "fastify";
import { MAX_PAGE_SIZE } from "../pagination.ts";

export interface PageQuery {
  limit: number;
  cursor?: string;
}

/** The library's page options from a list's query: a limit above the maximum is clamped (as Mastodon does), not refused. */
export function pageOptions(query: PageQuery): PageQuery {
  return {
    limit: Math.min(query.limit, MAX_PAGE_SIZE),
    ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
  };
}

/**
 * Sends a page with an RFC 8288 `Link: <...>; rel="next"` header when there is a next page:
 * the same path and query (the clamped limit, the next cursor). The target is a relative
 * reference, resolved against the request's own URL, so no Host header is trusted.
 */
export function sendPage<T extends { nextCursor?: string }>(
  request: FastifyRequest,
  reply: FastifyReply,
  page: T,
  query: PageQuery,
): T {
  if (page.nextCursor !== undefined) {
    const [path, search] = request.url.split("?", 2) as [string, string | undefined];
    const params = new URLSearchParams(search);
    params.set("limit", String(pageOptions(query).limit));
    params.set("cursor", page.nextCursor);
    void reply.header("link", `<${path}?${params.toString()}>; rel="next"`);
  }
  return page;
}
