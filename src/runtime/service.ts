import type { FastifyInstance } from "fastify";
import { buildApp } from "../api/app.ts";
import { LedgerMetrics } from "../api/metrics.ts";
import type { Config } from "../config.ts";
import { ConnectionLostError } from "../db/errors.ts";
import { createWorkers, openLedger } from "../ledger.ts";
import type { PartitionWorker } from "../workers/partition-worker.ts";
import { openDatabase, type Database } from "./database.ts";
import { loadJwtSecret } from "./secret.ts";

export interface Service {
  app: FastifyInstance;
  address: string;
  database: Database;
  workers: PartitionWorker[];
  /** Resolves when the service cannot recover by itself (its embedded PostgreSQL cannot be restarted). */
  fatal: Promise<Error>;
  /** Stop accepting, finish in-flight requests and the current consumer batches, stop the database. */
  stop(): Promise<void>;
}

/** `npm start` / `social-ledger serve`: database, migrations, HTTP API and (unless disabled) the consumers. */
export async function startService(config: Config, options: { workers?: boolean; host?: string; logger?: boolean } = {}): Promise<Service> {
  // Lines of the database's supervision before the app (and its logger) exist go nowhere:
  // nothing is supervised until openDatabase returns.
  let logDatabase: (level: "info" | "warn" | "error", message: string, fields?: Record<string, unknown>) => void = () => undefined;
  const database = await openDatabase(config, {
    applicationName: "social-ledger-serve",
    log: (level, message, fields) => logDatabase(level, message, fields),
  });
  const ledger = await openLedger(database.pool);
  const metrics = new LedgerMetrics(database.pool);
  const app = await buildApp({
    ledger, metrics, jwtSecret: await loadJwtSecret(config), writesPerMinute: config.writesPerMinute,
    readsPerMinute: config.readsPerMinute, corsOrigins: config.corsOrigins,
    databaseHealth: database.health,
    logger: options.logger === false ? false : { level: process.env.LOG_LEVEL ?? "info" },
  });
  logDatabase = (level, message, fields = {}) => app.log[level]({ database: fields }, message);
  const workers = options.workers === false ? [] : createWorkers(ledger, {
    onError: (_err, worker) => {
      metrics.consumerFailures.inc({ consumer: worker.startsWith("like") ? "like_count" : "follower_projection" });
    },
    // One line when a loop starts failing and one when it recovers; the failures in between
    // are counted in ledger_consumer_failures_total, not logged. An unexpected error keeps its stack.
    onFailing: (err, worker) => {
      if (err instanceof ConnectionLostError) app.log.warn({ worker, reason: err.message }, "consumer paused: database unavailable; retrying with backoff");
      else app.log.error({ err, worker }, "consumer pass failed; retrying with backoff");
    },
    onRecovered: (worker, outage) => app.log.info({ worker, ...outage }, "consumer resumed"),
    onLikes: (s) => {
      for (const [verdict, n] of Object.entries(s)) if (n > 0) metrics.consumerEvents.inc({ consumer: "like_count", verdict }, n);
    },
    onRelations: (v) => {
      for (const [verdict, n] of Object.entries(v)) if (n > 0) metrics.consumerEvents.inc({ consumer: "follower_projection", verdict }, n);
    },
  });
  const address = await app.listen({ port: config.port, host: options.host ?? "127.0.0.1" });
  for (const w of workers) w.start();
  let stopping: Promise<void> | undefined;
  return {
    app, address, database, workers,
    fatal: database.fatal,
    stop() {
      stopping ??= (async () => {
        await app.close();
        await Promise.all(workers.map((w) => w.stop()));
        await database.close();
      })();
      return stopping;
    },
  };
}
