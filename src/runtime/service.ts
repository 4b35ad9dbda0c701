import type { FastifyInstance } from "fastify";
import { buildApp } from "../api/app.ts";
import { ReplicaMetrics } from "../replicas/replica-metrics.ts";
import { ReplicaRouter } from "../replicas/replica-router.ts";
import { DashboardSampler, type SamplerOptions } from "../api/dashboard/sampler.ts";
import { incrementalAudit } from "../audit/incremental-audit.ts";
import { LedgerMetrics } from "../api/metrics.ts";
import { configWarnings, logLevel, type Config } from "../config.ts";
import type { Hooks } from "../hooks.ts";
import { createWorkers, openLedger } from "../ledger.ts";
import type { PartitionWorker } from "../workers/partition-worker.ts";
import { openCountLayer } from "../cache/count-layer.ts";
import type { LayerLog } from "../cache/layer-failures.ts";
import type { ReconcileReport } from "../cache/reconciler.ts";
import { consumerKindOf, observeConsumers } from "./consumer-observer.ts";
import { pruneJob } from "./prune-job.ts";
import { erasureJob } from "./erasure-job.ts";
import { countLayerRetentionCap } from "../cache/retention-cap.ts";
import { openDatabase, type Database } from "./database.ts";
import { startMetricsServer } from "./metrics-server.ts";
import { loadJwtSecret } from "./secret.ts";
import { registryOptionsOf, startableWebhookLoops } from "../webhooks/webhook-runtime.ts";

export interface Service {
  app: FastifyInstance;
  address: string;
  /** The /metrics address when it has a port of its own (serve --metrics-port). */
  metricsAddress: string | undefined;
  database: Database;
  workers: PartitionWorker[];
  /** Resolves when the service cannot recover by itself (its embedded PostgreSQL cannot be restarted). */
  fatal: Promise<Error>;
  /** Stop accepting, finish in-flight requests and the current consumer batches, stop the database. */
  stop(): Promise<void>;
}

export interface ServiceOptions {
  workers?: boolean;
  host?: string;
  logger?: boolean;
  /** Hook points of the ledger (tests park a consumer with them). */
  hooks?: Hooks;
  /** Serve /metrics on this port (of metricsHost) instead of the API's: the API's port then has none. */
  metricsPort?: number;
  /** The interface of metricsPort (default 127.0.0.1). */
  metricsHost?: string;
  /** Overrides of the dashboard sampler's settings from the config (tests sample faster). */
  dashboard?: SamplerOptions;
}

/** `npm start` / `social-ledger serve`: database, migrations, HTTP API and (unless disabled) the consumers. */
export async function startService(config: Config, options: ServiceOptions = {}): Promise<Service> {
  // Lines of the database's supervision before the app (and its logger) exist go nowhere:
  // nothing is supervised until openDatabase returns.
  let logDatabase: (level: "info" | "warn" | "error", message: string, fields?: Record<string, unknown>) => void = () =>
    undefined;
  const database = await openDatabase(config, {
    applicationName: "social-ledger-serve",
    statementDeadline: true,
    // The periodic audit reads every touched reader's inbox, and its full form everything: cut off
    // at a request's deadline it failed on every period once the inboxes had filled (an hour's soak).
    longStatementMs: config.dashboard.auditEverySeconds * 1000,
    log: (level, message, fields) => logDatabase(level, message, fields),
  });
  const ledger = await openLedger(database.pool, {
    erasureBatchSize: config.erasureBatchSize,
    feedMaxItems: config.feedMaxItems,
    feedHotFollowers: config.feedHotFollowers,
    feedAbsentMs: config.feedAbsentMs,
    feedReturnRebuildMs: config.feedReturnRebuildMs,
    writeBatchMax: config.writeBatchMax,
    pacing: config.pacing,
    ...(options.hooks ? { hooks: options.hooks } : {}),
  });
  const metrics = new LedgerMetrics(database.pool);
  let logAlert: (report: ReconcileReport) => void = () => undefined;
  let logCounts: LayerLog = () => undefined;
  // A Redis that does not answer within the start wait never holds up the start: the layer
  // starts degraded (counts from PostgreSQL) and connects in the background.
  const counts = await openCountLayer(database.pool, {
    redisUrl: config.redisUrl,
    allowEviction: config.redisAllowEviction,
    commandTimeoutMs: config.redisCommandTimeoutMs,
    keepAliveMs: config.redisKeepAliveMs,
    buckets: config.countBuckets,
    reconcileIntervalMs: config.reconcileIntervalMs,
    pacing: config.pacing,
    localTtlMs: config.countLocalTtlMs,
    registry: metrics.registry,
    onAlert: (report) => logAlert(report),
    log: (level, message, fields) => logCounts(level, message, fields),
  }).catch(async (err: unknown) => {
    await database.close();
    throw err;
  });
  const consumerLoops: PartitionWorker[] = [];
  let logDashboard: (err: unknown, what: string) => void = () => undefined;
  const dashboard = new DashboardSampler(
    {
      pool: database.pool,
      metrics,
      // O(change): what changed since the last periodic run and a rotating sample (src/audit/); the full audit stays on demand.
      audit: () => incrementalAudit(database.longPool, { feedMaxItems: config.feedMaxItems, hooks: ledger.hooks }),
      // The dashboard plots the counted views and the projection; the notification and feed loops' health is in /metrics.
      consumers: () =>
        consumerLoops.flatMap((w) => {
          const kind = consumerKindOf(w.name);
          return kind === "notifications" || kind === "feed"
            ? []
            : [{ name: w.name, kind, failedInARow: w.failedInARow }];
        }),
      onError: (err, what) => logDashboard(err, what),
    },
    {
      thresholds: {
        lagMs: config.dashboard.lagAlarmSeconds * 1000,
        consumerFailures: config.dashboard.consumerFailureAlarm,
      },
      auditEveryMs: config.dashboard.auditEverySeconds * 1000,
      historyMs: config.dashboard.historySeconds * 1000,
      ...options.dashboard,
    },
  );
  const replicaMetrics = config.replicas.urls.length === 0 ? undefined : new ReplicaMetrics(metrics.registry);
  const replicas =
    replicaMetrics &&
    ReplicaRouter.fromUrls(database.pool, config.replicas.urls, {
      maxLagMs: config.replicas.maxLagMs,
      tokenWaitMs: config.replicas.tokenWaitMs,
      checkEveryMs: config.replicas.checkEveryMs,
      timeouts: config.postgres,
      onState: replicaMetrics.onState,
      onRoute: replicaMetrics.onRoute,
      onTokenWait: replicaMetrics.onTokenWait,
    });
  // Whatever started before a later step fails (a port in use, a bad secret) is stopped again:
  // a failed start must not leave replica checks, Redis clients or an embedded PostgreSQL behind.
  const undoStart = async (err: unknown): Promise<never> => {
    await replicas?.stop().catch(() => undefined);
    await counts.close().catch(() => undefined);
    await database.close().catch(() => undefined);
    throw err;
  };
  // A replica that is down at start is no error: reads go to the primary until a check finds it up.
  await replicas?.start();
  const app = await buildApp({
    ...(replicas ? { replicas } : {}),
    counts: counts.reader,
    countsState: counts.state,
    rateLimitRedis: counts.redis,
    ledger,
    metrics,
    dashboard,
    ...(config.jwks ? { jwks: config.jwks } : { jwtSecret: await loadJwtSecret(config) }),
    jwtMaxTtlSeconds: config.jwtMaxTtlSeconds,
    writesPerMinute: config.writesPerMinute,
    readsPerMinute: config.readsPerMinute,
    documentsPerMinute: config.documentsPerMinute,
    authFailuresPerMinute: config.authFailuresPerMinute,
    corsOrigins: config.corsOrigins,
    metricsToken: config.metricsToken,
    metricsRefreshMs: config.metricsRefreshSeconds * 1000,
    metricsOnApi: options.metricsPort === undefined,
    databaseHealth: database.health,
    webhooks: registryOptionsOf(config.webhooks),
    logger: options.logger === false ? false : { level: logLevel() },
  }).catch(undoStart);
  logDatabase = (level, message, fields = {}) => app.log[level]({ database: fields }, message);
  for (const warning of configWarnings(config)) app.log.warn(warning);
  if (database.accessChanges.length > 0)
    logDatabase("info", "secured the embedded PostgreSQL", { changes: database.accessChanges });
  logDashboard = (err, what) =>
    app.log.warn(
      { reason: err instanceof Error ? err.message : String(err) },
      `dashboard ${what} failed; retrying at the next sample`,
    );
  logCounts = (level, message, fields = {}) => app.log[level]({ counts: fields }, message);
  counts.watchState((state, reason) => {
    if (state === "up") app.log.info({ counts: { state } }, "count layer up: counts are served from Redis");
    if (state === "degraded")
      app.log.warn(
        { counts: { state, reason } },
        "count layer degraded: Redis does not answer; counts are read from PostgreSQL",
      );
  });
  logAlert = (report) =>
    app.log.warn(
      { drift: { kind: report.kind, drifted: report.drifted.length, visited: report.visited } },
      "count drift above threshold; repaired",
    );
  const workers = options.workers === false ? [] : createWorkers(ledger, observeConsumers(metrics, app.log));
  consumerLoops.push(...workers);
  const maintenance =
    options.workers === false || config.pruneEverySeconds === 0
      ? []
      : [
          pruneJob(database.pool, config.pruneEverySeconds * 1000, app.log, {
            ...config.retention,
            pacing: config.pacing,
            caps: counts.redis ? [countLayerRetentionCap(counts.redis)] : [],
          }),
        ];
  // Webhook deliveries (docs/webhooks.md) run beside the consumers; `webhook-worker` runs them alone.
  const webhookLoops =
    options.workers === false
      ? []
      : startableWebhookLoops(
          database.pool,
          config.webhooks,
          metrics.registry,
          {
            failing: (worker, err) =>
              app.log.warn(
                { worker, reason: err instanceof Error ? err.message : String(err) },
                "webhook delivery pass failed; retrying with backoff",
              ),
            recovered: (worker, outage) => app.log.info({ worker, ...outage }, "webhook delivery resumed"),
            lost: (webhookIds, timeline) =>
              app.log.error(
                { webhookIds, timelineFrom: timeline.from, timelineTo: timeline.to },
                "webhook messages delivered before a database promotion name events the new primary does not have (webhook_lost_delivery, docs/failover.md)",
              ),
          },
          options.hooks,
        );
  // Erasures are started by DELETE /v1/accounts/{id} and continued here, after a restart too.
  if (options.workers !== false) maintenance.push(erasureJob(ledger.erasure, app.log));
  const address = await app
    .listen({ port: config.port, host: options.host ?? "127.0.0.1" })
    .catch(async (err: unknown) => {
      await app.close().catch(() => undefined);
      return undoStart(err);
    });
  const metricsServer =
    options.metricsPort === undefined
      ? undefined
      : await startMetricsServer(metrics, {
          port: options.metricsPort,
          host: options.metricsHost ?? "127.0.0.1",
          token: config.metricsToken,
          refreshMs: config.metricsRefreshSeconds * 1000,
        }).catch(async (err: unknown) => {
          await app.close().catch(() => undefined);
          return undoStart(err);
        });
  for (const w of [...workers, ...counts.workers, ...maintenance, ...webhookLoops]) w.start();
  let stopping: Promise<void> | undefined;
  return {
    app,
    address,
    database,
    workers,
    metricsAddress: metricsServer && `http://${options.metricsHost ?? "127.0.0.1"}:${options.metricsPort}/metrics`,
    fatal: database.fatal,
    stop() {
      stopping ??= (async () => {
        await app.close();
        await metricsServer?.close();
        await replicas?.stop();
        await Promise.all([...workers, ...maintenance, ...webhookLoops].map((w) => w.stop()));
        await counts.close();
        await database.close();
      })();
      return stopping;
    },
  };
}
