import type { FastifyBaseLogger } from "fastify";
import type { LedgerMetrics } from "../api/metrics.ts";
import { ConnectionLostError } from "../db/errors.ts";
import type { WorkerOptions } from "../ledger.ts";

type ConsumerCallbacks = Required<
  Pick<
    WorkerOptions,
    "onError" | "onFailing" | "onRecovered" | "onLikes" | "onRelations" | "onComments" | "onNotifications" | "onFeed"
  >
>;

/** The view a consumer loop maintains, from its name (createWorkers names them like-counter#g, follower-projector#g, comment-counter#g, notifications#g, feed#g). */
export function consumerKindOf(
  worker: string,
): "like_count" | "follower_projection" | "comment_count" | "notifications" | "feed" {
  if (worker.startsWith("notifications")) return "notifications";
  if (worker.startsWith("feed")) return "feed";
  return worker.startsWith("like")
    ? "like_count"
    : worker.startsWith("comment")
      ? "comment_count"
      : "follower_projection";
}

/**
 * What `serve` and `worker` do with their consumer loops' events, so both expose the same
 * metrics and log the same lines: every failed pass counts in ledger_consumer_failures_total;
 * one line when a loop starts failing and one when it recovers (an unexpected error keeps its
 * stack, an unavailable database does not); applied/covered/stale/dup events per consumer.
 */
export function observeConsumers(metrics: LedgerMetrics, log: FastifyBaseLogger): ConsumerCallbacks {
  return {
    onError: (_err, worker) => metrics.consumerFailures.inc({ consumer: consumerKindOf(worker) }),
    onFailing: (err, worker) => {
      if (err instanceof ConnectionLostError)
        log.warn({ worker, reason: err.message }, "consumer paused: database unavailable; retrying with backoff");
      else log.error({ err, worker }, "consumer pass failed; retrying with backoff");
    },
    onRecovered: (worker, outage) => log.info({ worker, ...outage }, "consumer resumed"),
    onLikes: (s) => {
      for (const [verdict, n] of Object.entries(s))
        if (n > 0) metrics.consumerEvents.inc({ consumer: "like_count", verdict }, n);
    },
    onRelations: (v) => {
      for (const [verdict, n] of Object.entries(v))
        if (n > 0) metrics.consumerEvents.inc({ consumer: "follower_projection", verdict }, n);
    },
    onComments: (s) => {
      for (const [verdict, n] of Object.entries(s))
        if (n > 0) metrics.consumerEvents.inc({ consumer: "comment_count", verdict }, n);
    },
    onNotifications: (s) => {
      for (const [verdict, n] of Object.entries(s))
        if (n > 0) metrics.consumerEvents.inc({ consumer: "notifications", verdict }, n);
    },
    onFeed: (s) => {
      for (const [verdict, n] of Object.entries(s))
        if (n > 0) metrics.consumerEvents.inc({ consumer: "feed", verdict }, n);
    },
  };
}
