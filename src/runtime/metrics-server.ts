import Fastify, { type FastifyInstance } from "fastify";
import { METRICS_REFRESH_MS, type LedgerMetrics } from "../api/metrics.ts";
import { metricsRoutes } from "../api/routes/metrics.ts";
import { namedSchemas } from "../api/schemas.ts";

/**
 * `/metrics` (and a `/healthz` for liveness) on a port of its own: a standalone `social-ledger
 * worker` or `relay`, and `serve --metrics-port` (which then serves no /metrics on the API's
 * port). Same registry, names and labels as serve's /metrics, the same optional bearer token
 * (LEDGER_METRICS_TOKEN), and the database figures are read on a timer, never by a scrape.
 */
export async function startMetricsServer(
  metrics: LedgerMetrics,
  options: { port: number; host: string; token?: string | undefined; refreshMs?: number },
): Promise<FastifyInstance> {
  const app = Fastify({ logger: false, requestTimeout: 10_000, connectionTimeout: 30_000 });
  // The route's 401 refers to the API's named error schema, which this instance must know too.
  for (const schema of namedSchemas()) app.addSchema(schema);
  await app.register(metricsRoutes, { metrics, token: options.token });
  app.get("/healthz", async () => ({ status: "ok" }));
  app.addHook("onClose", async () => metrics.stopRefreshing());
  await metrics.startRefreshing(options.refreshMs ?? METRICS_REFRESH_MS);
  try {
    await app.listen({ port: options.port, host: options.host });
  } catch (err) {
    await app.close(); // stops the refresh timer
    throw err;
  }
  return app;
}
