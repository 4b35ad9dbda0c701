import Fastify, { type FastifyInstance } from "fastify";
import type { LedgerMetrics } from "../api/metrics.ts";

/**
 * `/metrics` (and a `/healthz` for liveness) of a process without the HTTP API: a standalone
 * `social-ledger worker`. Same registry, names and labels as serve's /metrics.
 */
export async function startMetricsServer(metrics: LedgerMetrics, options: { port: number; host: string }): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  app.get("/metrics", async (_request, reply) => {
    void reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  app.get("/healthz", async () => ({ status: "ok" }));
  await app.listen({ port: options.port, host: options.host });
  return app;
}
