import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { errorBody } from "../errors.ts";
import type { LedgerMetrics } from "../metrics.ts";

const digest = (value: string) => createHash("sha256").update(value).digest();

/** The Authorization header is `Bearer <token>`, compared in constant time (over digests, so lengths do not leak either). */
function bearerMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer +(\S+) *$/i.exec(header ?? "");
  return match !== null && timingSafeEqual(digest(match[1]!), digest(token));
}

/**
 * GET /metrics: the registry as it is in memory (figures from the database are refreshed on a
 * timer, never by a scrape). With `token` (LEDGER_METRICS_TOKEN) a scrape must send it as a
 * bearer token, else 401; it is no JWT, so the API's auth hook does not read it (auth: none).
 * Registered by the API and by the metrics port of serve, worker and relay (src/runtime/metrics-server.ts).
 */
export async function metricsRoutes(
  app: FastifyInstance,
  opts: { metrics: LedgerMetrics; token?: string | undefined },
): Promise<void> {
  const { metrics, token } = opts;
  app.get(
    "/metrics",
    {
      config: { auth: "none" },
      schema: {
        tags: ["health"],
        summary: "Prometheus metrics (a bearer token when LEDGER_METRICS_TOKEN is set)",
        hide: false,
        security: [{ metricsToken: [] }, {}],
        // Documentation only: the text is sent as it is (a string with its own content type is not serialized).
        response: {
          200: {
            description: "the Prometheus text exposition format",
            content: { "text/plain": { schema: { type: "string" } } },
          },
          401: { content: { "application/json": { schema: { $ref: "LedgerError#" } } } },
        },
      },
    },
    async (request: FastifyRequest, reply: FastifyReply) => {
      if (token !== undefined && !bearerMatches(request.headers.authorization, token)) {
        return reply
          .status(401)
          .header("www-authenticate", 'Bearer realm="metrics"')
          .send(errorBody("UNAUTHENTICATED", "/metrics requires the bearer token of LEDGER_METRICS_TOKEN"));
      }
      void reply.header("content-type", metrics.registry.contentType);
      return metrics.registry.metrics();
    },
  );
}
