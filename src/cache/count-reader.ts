import { LRUCache } from "lru-cache";
import type { Pool } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import type { CacheMetrics } from "./cache-metrics.ts";
import { MalformedCounterError, type CachedCount, type CountStore } from "./count-store.ts";
import type { CounterKind } from "./counter-kinds.ts";
import type { FailureSink } from "./layer-failures.ts";

const NO_HOOKS = new Hooks();

/** A count from Redis, and whether this read had to backfill it from the facts (a miss). */
interface LookedUp extends CachedCount {
  backfilled: boolean;
}

export type CountAnswer =
  | { source: "cache"; count: number; reconciledAgeMs: number }
  | { source: "database"; count: number; lag: number; stale: boolean; pendingForItem?: number; degraded?: true };

export interface CountReaderOptions {
  metrics?: CacheMetrics;
  /** How long a count stays in this process's memory (LEDGER_COUNT_LOCAL_TTL_MS); 0 turns the local cache off. */
  localTtlMs?: number;
  localMax?: number;
  /** Hook point "cache.beforeBackfill": a backfill's truth is read, not yet installed. */
  hooks?: Hooks;
  /** Where a malformed counter found by a read is reported (it is dropped and backfilled). */
  failures?: FailureSink;
}

/**
 * Cache-aside count reads. With a store: this process's short-TTL cache, then Redis (one HMGET
 * sums base and every bucket), and on a missing counter a backfill from the facts installed by
 * the same script as a reconciliation. lru-cache's fetch makes the miss single-flight: callers
 * of one key while its fetch runs share it, so a hot key's miss is one Redis read (and at most
 * one database query), not one per request. Any Redis failure answers from PostgreSQL instead;
 * a caller that wants the error bound (`exact`) always gets the database path.
 */
export class CountReader {
  /** The count layer's metrics, for other writers of the same figures (the rebuild's drift). */
  readonly metrics: CacheMetrics | undefined;
  private readonly local: LRUCache<string, LookedUp> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly store: CountStore | undefined,
    private readonly options: CountReaderOptions = {},
  ) {
    this.metrics = options.metrics;
    const ttl = options.localTtlMs ?? 250;
    if (store && ttl > 0) {
      this.local = new LRUCache<string, LookedUp>({
        max: options.localMax ?? 10_000,
        ttl,
        fetchMethod: (key) => this.readRedis(key),
      });
    }
  }

  /** `database` is where the database path reads (a replica the API's read routing chose); the primary by default. */
  async read(
    kind: CounterKind,
    target: string,
    options: { allowedLag: number; exact?: boolean },
    database: Pool = this.pool,
  ): Promise<CountAnswer> {
    validateId("target", target);
    validateNonNegativeInteger("allowedLag", options.allowedLag);
    let degraded = false;
    if (this.store && !options.exact) {
      const cached = await this.readCached(kind, target).catch(() => undefined);
      this.options.metrics?.cacheLookups.inc({
        kind: kind.name,
        result: cached ? (cached.backfilled ? "miss" : "hit") : "fallback",
      });
      if (cached) {
        this.options.metrics?.countReads.inc({ kind: kind.name, source: "cache" });
        return { source: "cache", count: cached.count, reconciledAgeMs: Math.max(0, Date.now() - cached.reconciledAt) };
      }
      degraded = true;
    }
    this.options.metrics?.countReads.inc({ kind: kind.name, source: "database" });
    const answer = await kind.readDatabase(database, target, options.allowedLag);
    // The count layer was asked and did not answer: say so, next to the database's own bound.
    return degraded ? { source: "database", ...answer, degraded: true } : { source: "database", ...answer };
  }

  private async readCached(kind: CounterKind, target: string): Promise<LookedUp | undefined> {
    const key = `${kind.name}\u0000${target}`;
    this.kinds.set(kind.name, kind);
    if (!this.local) return this.readRedis(key);
    const status: LRUCache.Status<string, LookedUp> = {};
    const found = await this.local.fetch(key, { status });
    // Served from this process's memory: a hit, even if the entry was a backfill when fetched.
    return found && status.fetch === "hit" ? { ...found, backfilled: false } : found;
  }

  private readonly kinds = new Map<string, CounterKind>();

  private async readRedis(key: string): Promise<LookedUp | undefined> {
    const store = this.store!;
    const [kindName, target] = key.split("\u0000") as [string, string];
    const kind = this.kinds.get(kindName)!;
    const cached = await store.read(kind.name, target).catch(async (err: unknown) => {
      if (!(err instanceof MalformedCounterError)) throw err;
      // Not repairable in place: dropped, and backfilled from the facts just below.
      await store.drop(kind.name, target);
      this.options.failures?.failed({ kind: kind.name, step: "read", target, error: err, dropped: true });
      return undefined;
    });
    if (cached) return { ...cached, backfilled: false };
    const { rows } = await this.pool.query<{ target: string; n: number; bound: string[] }>(kind.truthSql, [
      [target],
      null,
    ]);
    const row = rows[0]!;
    await (this.options.hooks ?? NO_HOOKS).at("cache.beforeBackfill", { kind: kind.name, target, truth: row.n });
    await store.install(kind.name, target, row.n, row.bound.map(Number), false);
    const installed = await store.read(kind.name, target);
    return installed && { ...installed, backfilled: true };
  }
}
