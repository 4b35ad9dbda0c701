import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from "fastify";
import { createRequire } from "node:module";
import { redisRateLimitStore } from "../cache/rate-limit-store.ts";
import type { RedisClient } from "../cache/redis-connection.ts";
import type { RateLimit } from "./context.ts";
import { HttpError } from "./errors.ts";

/** What a budget's store answers for one request: requests in the current window so far (this one included), ms until it ends. */
type Counted = { current: number; ttl: number };

/** The store interface of @fastify/rate-limit (its LocalStore, and ours in Redis: src/cache/rate-limit-store.ts). */
interface BudgetStore {
  incr(key: string, callback: (err: Error | null, result?: Counted) => void, timeWindow: number, max: number): void;
}

const LocalStore = createRequire(import.meta.url)("@fastify/rate-limit/store/LocalStore.js") as new (continueExceeding?: boolean, exponentialBackoff?: boolean, cache?: number) => BudgetStore;

export const WINDOW_MS = 60_000;

/** The store of one budget: its keys in Redis when the count layer has one (shared by every API process), else in this process. */
export function budgetStore(budget: "writes" | "reads", redis: RedisClient | undefined): BudgetStore {
  if (!redis) return new LocalStore(false, false, 5000);
  const Store = redisRateLimitStore(redis);
  return new Store(undefined).child({ ledgerBudget: budget });
}

/** "45 seconds", "1 minute": the wait as @fastify/rate-limit's message spelled it (`ms` format, long). */
function waitText(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  const [n, unit] = ms < 60_000 ? [Math.round(ms / 1000), "second"] : [Math.round(ms / 60_000), "minute"];
  return `${n} ${unit}${n === 1 ? "" : "s"}`;
}

/**
 * A budget of `max` requests per caller (the key) and minute, as a callback onRequest hook.
 * It replaced @fastify/rate-limit's route hook, whose fixed-window stores it uses unchanged,
 * with the same headers and the same 429: that hook is an async function with four awaits
 * (the key generator, max, the store's callback wrapped in a promise) and reads
 * request.routeOptions (a new object per read) on every request; with the in-process store the
 * answer here is synchronous, so an admitted request costs no promise and no microtask turn.
 * Every answer carries X-RateLimit-Limit, -Remaining and -Reset (seconds); an exceeded one is
 * 429 RATE_LIMITED with Retry-After, before the input is validated or the handler runs.
 */
export function budgetHook(store: BudgetStore, max: number, keyOf: (request: FastifyRequest) => string): RateLimit {
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    store.incr(keyOf(request), (err, counted) => {
      // Neither store reports errors (the Redis one counts in this process while Redis does not
      // answer); if one did, the request fails (500) rather than going unlimited.
      if (err || !counted) return done(err ?? new Error("the rate limit store answered nothing"));
      const resetS = Math.ceil(counted.ttl / 1000);
      void reply.header("x-ratelimit-limit", max);
      void reply.header("x-ratelimit-remaining", Math.max(0, max - counted.current));
      void reply.header("x-ratelimit-reset", resetS);
      if (counted.current <= max) return done();
      void reply.header("retry-after", resetS);
      done(new HttpError(429, "RATE_LIMITED", `Rate limit exceeded, retry in ${waitText(resetS * 1000)}`));
    }, WINDOW_MS, max);
  };
}
