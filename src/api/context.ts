import type { CountReader } from "../cache/count-reader.ts";
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from "fastify";
import type { Ledger } from "../ledger.ts";
import type { DashboardSampler } from "./dashboard/sampler.ts";
import type { LedgerMetrics } from "./metrics.ts";
import type { RouteTable } from "./route-table.ts";

declare module "fastify" {
  interface FastifyInstance {
    ledger: Ledger;
    metrics: LedgerMetrics;
    dashboard: DashboardSampler;
    counts: CountReader;
    routeTable: RouteTable;
  }
}

/** A rate limiter shared by a kind of route (every write, every read), a callback onRequest hook (rate-limits.ts). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- fits the onRequest of routes of any generic
export type RateLimit = (request: FastifyRequest<any>, reply: FastifyReply<any>, done: HookHandlerDoneFunction) => void;

/** The two budgets: writes per user, reads per user (or per IP without a token), the larger. */
export interface RateLimits {
  writeRateLimit: RateLimit;
  readRateLimit: RateLimit;
}
