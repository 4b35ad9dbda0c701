import type { Registry } from "prom-client";
import type { WebhookConfig } from "../config.ts";
import type { Pool } from "../db/pool.ts";
import type { Hooks } from "../hooks.ts";
import type { PartitionWorker } from "../workers/partition-worker.ts";
import { WebhookDelivery, webhookWorkers } from "./delivery-worker.ts";
import type { RegistryOptions } from "./endpoint-registry.ts";
import { WebhookMetrics } from "./webhook-metrics.ts";

/** What serve and webhook-worker build from LEDGER_WEBHOOK_*: the registry's policy, the delivery and its loops. */

export function registryOptionsOf(config: WebhookConfig): RegistryOptions {
  return {
    allowPrivate: config.allowPrivate,
    failingAfter: config.failingAfter,
    rotationGraceSeconds: config.rotationGraceSeconds,
  };
}

export interface WebhookLoopLog {
  failing(worker: string, err: unknown): void;
  recovered(worker: string, outage: { failedPasses: number; ms: number }): void;
  /** Delivered messages whose event a promotion lost (docs/failover.md). */
  lost(webhookIds: string[], timeline: { from: number; to: number }): void;
}

/** The delivery loops of one process, counting their attempts in `registry`. */
export function startableWebhookLoops(
  pool: Pool,
  config: WebhookConfig,
  registry: Registry,
  log: WebhookLoopLog,
  hooks?: Hooks,
): PartitionWorker[] {
  const metrics = new WebhookMetrics(registry, pool, config.failingAfter);
  const delivery = new WebhookDelivery(pool, {
    limits: {
      allowPrivate: config.allowPrivate,
      responseTimeoutMs: config.timeoutMs,
      connectTimeoutMs: Math.min(5_000, config.timeoutMs),
    },
    retryBaseMs: config.retryBaseMs,
    maxBackoffMs: config.maxBackoffSeconds * 1000,
    onAttempt: metrics.onAttempt,
    onLost: (lost, timeline) => {
      for (const d of lost) metrics.lostDeliveries.inc({ endpoint: d.endpointId });
      log.lost(
        lost.map((d) => d.webhookId),
        timeline,
      );
    },
    ...(hooks ? { hooks } : {}),
  });
  return config.loops === 0
    ? []
    : webhookWorkers(delivery, config.loops, {
        onFailing: (err, worker) => log.failing(worker, err),
        onRecovered: (worker, outage) => log.recovered(worker, outage),
      });
}
