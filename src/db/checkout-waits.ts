/** Upper bounds (seconds) of ledger_db_pool_checkout_wait_seconds' buckets; a checkout gives up at 5 s by default. */
export const CHECKOUT_WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5] as const;

/**
 * How long checkouts of one pool waited for a connection (an idle one, a new one, or one another
 * caller released), in plain numbers the metrics read when /metrics is scraped: the pool exists
 * before any registry, and a pool read by several registries (tests) keeps one set of figures.
 */
export class CheckoutWaits {
  /** Checkouts per bucket, not cumulative; a wait above the last bound is only in `count`. */
  readonly buckets: number[] = CHECKOUT_WAIT_BUCKETS.map(() => 0);
  sum = 0;
  count = 0;

  observe(seconds: number): void {
    // prom-client's rule: a value goes into the first bucket whose bound is >= it.
    let bucket = 0;
    while (bucket < CHECKOUT_WAIT_BUCKETS.length && seconds > CHECKOUT_WAIT_BUCKETS[bucket]!) bucket++;
    if (bucket < CHECKOUT_WAIT_BUCKETS.length) this.buckets[bucket]!++;
    this.sum += seconds;
    this.count++;
  }
}
