import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from "fastify";
import { LRUCache } from "lru-cache";
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

const LocalStore = createRequire(import.meta.url)("@fastify/rate-limit/store/LocalStore.js") as new (
  continueExceeding?: boolean,
  exponentialBackoff?: boolean,
  cache?: number,
) => BudgetStore;

export const WINDOW_MS = 60_000;

/** The store of one budget: its keys in Redis when the count layer has one (shared by every API process), else in this process. */
export function budgetStore(
  budget: "writes" | "reads" | "documents" | "refusals",
  redis: RedisClient | undefined,
): BudgetStore {
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

/** The key of a budget counted per client address (the documents, refused tokens): no caller is known. */
export const perAddress = (request: FastifyRequest): string => `ip:${request.ip}`;

function setHeaders(reply: FastifyReply, max: number, remaining: number, resetS: number): void {
  void reply.header("x-ratelimit-limit", max);
  void reply.header("x-ratelimit-remaining", Math.max(0, remaining));
  void reply.header("x-ratelimit-reset", resetS);
}

function rateLimited(reply: FastifyReply, resetS: number): HttpError {
  void reply.header("retry-after", resetS);
  return new HttpError(429, "RATE_LIMITED", `Rate limit exceeded, retry in ${waitText(resetS * 1000)}`);
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
    store.incr(
      keyOf(request),
      (err, counted) => {
        // Neither store reports errors (the Redis one counts in this process while Redis does not
        // answer); if one did, the request fails (500) rather than going unlimited.
        if (err || !counted) return done(err ?? new Error("the rate limit store answered nothing"));
        const resetS = Math.ceil(counted.ttl / 1000);
        setHeaders(reply, max, max - counted.current, resetS);
        if (counted.current <= max) return done();
        done(rateLimited(reply, resetS));
      },
      WINDOW_MS,
      max,
    );
  };
}

/** Addresses over their budget of refused tokens that this process knows of, with when their window ends. */
const OVER_ADDRESSES = 10_000;

/**
 * A budget of `max` refused tokens (401s of the auth hook) per client address and minute. The
 * per-user budgets run after authentication, so without it a client could have bad tokens checked,
 * each a signature verification, without end. Only refusals count: a valid token is checked once
 * and then remembered, so a token that works never draws on it (many users behind one address
 * included). The refusal that goes over the budget is answered 429 instead of 401, and from then
 * to the end of the window this process checks no token it has not verified before from that
 * address (429 at once, before the signature); remembered tokens keep working. With Redis the
 * count is shared by the API processes; each learns that an address is over at its own next refusal.
 */
export class RefusalBudget {
  private readonly over = new LRUCache<string, number>({ max: OVER_ADDRESSES });

  constructor(
    private readonly store: BudgetStore,
    readonly max: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** The 429 for an address over its budget (its headers set), or undefined when a token from it may be checked. */
  refuseEarly(request: FastifyRequest, reply: FastifyReply): HttpError | undefined {
    const key = perAddress(request);
    const until = this.over.get(key);
    if (until === undefined) return undefined;
    const leftMs = until - this.now();
    if (leftMs <= 0) {
      this.over.delete(key);
      return undefined;
    }
    const resetS = Math.ceil(leftMs / 1000);
    setHeaders(reply, this.max, 0, resetS);
    return rateLimited(reply, resetS);
  }

  /** Counts a refusal (`refusal`, a 401) of the request's address and answers it, or a 429 once the address is over. */
  count(request: FastifyRequest, reply: FastifyReply, refusal: Error, done: HookHandlerDoneFunction): void {
    const key = perAddress(request);
    this.store.incr(
      key,
      (err, counted) => {
        if (err || !counted) return done(err ?? new Error("the rate limit store answered nothing"));
        const resetS = Math.ceil(counted.ttl / 1000);
        setHeaders(reply, this.max, this.max - counted.current, resetS);
        if (counted.current <= this.max) return done(refusal);
        this.over.set(key, this.now() + counted.ttl);
        done(rateLimited(reply, resetS));
      },
      WINDOW_MS,
      this.max,
    );
  }
}
