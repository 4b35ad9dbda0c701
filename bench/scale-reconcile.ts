/**
 * The scale bench's reconciliation figure: K like counters present in Redis (a redis-server of the
 * bench's own), one like event on each, fed to Redis by the feeder, then one run of the Reconciler
 * (src/cache/reconciler.ts) over the K changed counters, timed. A batched or paced reconciler that
 * keeps Reconciler.reconcile plugs in unchanged.
 */
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { Reconciler, type ReconcileReport } from "../src/cache/reconciler.ts";
import type { RedisClient } from "../src/cache/redis-connection.ts";
import type { Ledger } from "../src/ledger.ts";
import { itemId, type Population } from "../support/scale-population.ts";

/** The K counters' targets: items 2..K+1 (the hot item stays out: its truth read alone is N/10 rows). */
const target = (k: number) => itemId(2 + k);

/** One like per target by a user of its own ($1 user, $2 first item number, $3 last, $4 P), through like_set. */
const LIKE_EACH = `
  SELECT count(*)::int AS n FROM generate_series($2::bigint, $3::bigint) i,
         LATERAL like_set($1::text, 'i' || lpad(i::text, 8, '0'), true, ledger_partition($1::text, $4::int))`;

export class ReconcileBench {
  private round = 0;
  private readonly store: CountStore;
  private readonly feeder: CountFeeder;
  readonly reconciler: Reconciler;

  constructor(
    private readonly ledger: Ledger,
    redis: RedisClient,
  ) {
    this.store = new CountStore(redis, 16);
    this.feeder = new CountFeeder(ledger.pool, this.store, LIKE_COUNTS);
    this.reconciler = new Reconciler(ledger.pool, this.store);
  }

  /** Installs the K counters from the database (as backfilling reads would) and sets the reconciler's boundary. */
  async prepare(pop: Population, k: number): Promise<void> {
    if (k > pop.items - 1)
      throw new Error(`${k} changed counters need ${k + 1} items, the population has ${pop.items}`);
    await this.store.redis.flushAll();
    await this.feeder.pollOnce(); // the feeder's cursor starts at the present
    const { rows: positions } = await this.ledger.pool.query<{ last: number }>(LIKE_COUNTS.positionsSql);
    const bound = positions.map((p) => Number(p.last));
    // 50 at a time: the client's 200 ms command deadline (the service's) holds on a loaded machine.
    for (let i = 0; i < k; i += 50) {
      const targets = Array.from({ length: Math.min(50, k - i) }, (_, j) => target(i + j));
      const { rows } = await this.ledger.pool.query<{ item_id: string; n: number }>(
        "SELECT t AS item_id, coalesce((SELECT sum(n) FROM like_count c WHERE c.item_id = t), 0)::int AS n FROM unnest($1::text[]) t",
        [targets],
      );
      await Promise.all(rows.map((r) => this.store.install(LIKE_COUNTS.name, r.item_id, r.n, bound, false)));
    }
    await this.reconciler.reconcile(LIKE_COUNTS);
  }

  /** One like on each of the K counters' items, fed to Redis: K changed counters for the next run. */
  async change(k: number): Promise<void> {
    const user = `rc-user-${this.round++}`;
    for (let i = 0; i < k; i += 10_000) {
      await this.ledger.pool.query(LIKE_EACH, [user, 2 + i, 2 + Math.min(k, i + 10_000) - 1, this.ledger.partitions]);
    }
    while ((await this.feeder.pollOnce()) > 0);
  }

  reconcile(): Promise<ReconcileReport> {
    return this.reconciler.reconcile(LIKE_COUNTS);
  }
}
