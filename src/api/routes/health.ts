import type { FastifyInstance } from "fastify";
import { migrationStatus } from "../../db/migrate.ts";
import { errorBody } from "../errors.ts";
import { errors } from "../schemas.ts";

export async function healthRoutes(app: FastifyInstance): Promise<void> {
  const { ledger, metrics } = app;

  app.get("/healthz", {
    schema: { tags: ["health"], summary: "Liveness: the process serves requests", response: { 200: { type: "object", properties: { status: { type: "string" } } } } },
  }, async () => ({ status: "ok" }));

  app.get("/readyz", {
    schema: {
      tags: ["health"], summary: "Readiness: the database answers and its migrations are current",
      response: { 200: { type: "object", properties: { status: { type: "string" }, migrations: { type: "integer" } } }, 503: errors(503)[503]! },
    },
  }, async (_request, reply) => {
    try {
      const { latest, applied } = await migrationStatus(ledger.pool);
      if (applied < latest) return reply.status(503).send(errorBody("NOT_READY", `migrations ${applied}/${latest} applied`));
      return { status: "ready", migrations: applied };
    } catch (err) {
      return reply.status(503).send(errorBody("NOT_READY", `database unreachable: ${(err as Error).message}`));
    }
  });

  app.get("/metrics", { schema: { tags: ["health"], summary: "Prometheus metrics", hide: false } }, async (_request, reply) => {
    void reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
