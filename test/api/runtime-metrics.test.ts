import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { buildApp } from "../../src/api/app.ts";
import { DashboardSampler } from "../../src/api/dashboard/sampler.ts";
import { LedgerMetrics } from "../../src/api/metrics.ts";
import { CHECKOUT_WAIT_BUCKETS } from "../../src/db/checkout-waits.ts";
import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";

/**
 * The runtime figures of /metrics: the process and Node runtime (prom-client's default metrics
 * under the ledger_ prefix) and the PostgreSQL pool, scraped over HTTP from an app on a real
 * database. The pool's figures are read from the pool itself, so they must answer while every
 * connection is checked out.
 */

const POOL_SIZE = 3;

/** One sample's value: `name` with exactly `labels` ("" for none); undefined when the scrape has no such line. */
function sample(text: string, name: string, labels = ""): number | undefined {
  const escaped = `${name}${labels}`.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const m = new RegExp(`^${escaped} (\\S+)$`, "m").exec(text);
  return m ? Number(m[1]) : undefined;
}

/** An app on a pool of POOL_SIZE whose own background reads (dashboard sample, metrics refresh) run once at start only: the test is the pool's only other user. */
async function startQuietApp(t: test.TestContext) {
  const db = await createTestDatabase({ partitions: 1, poolSize: POOL_SIZE });
  const ledger = await openLedger(db.pool);
  const metrics = new LedgerMetrics(db.pool);
  const dashboard = new DashboardSampler({ pool: db.pool, metrics }, { sampleMs: 3_600_000 });
  const app = await buildApp({
    ledger,
    jwtSecret: new Uint8Array(randomBytes(32)),
    logger: false,
    metrics,
    dashboard,
    metricsRefreshMs: 3_600_000,
  });
  const base = await app.listen({ port: 0, host: "127.0.0.1" });
  t.after(async () => {
    await app.close();
    await db.close();
  });
  const scrape = async () => {
    const res = await fetch(`${base}/metrics`);
    assert.equal(res.status, 200);
    return res.text();
  };
  return { db, scrape };
}

test(
  "runtime metrics: /metrics carries the process's CPU, memory, heap, event-loop delay and GC figures and the PostgreSQL pool's, under the ledger_ prefix",
  { timeout: 60_000 },
  async (t) => {
    const { scrape } = await startQuietApp(t);
    const text = await scrape();
    const types: [string, string][] = [
      ["ledger_process_cpu_seconds_total", "counter"],
      ["ledger_process_resident_memory_bytes", "gauge"],
      ["ledger_nodejs_heap_size_used_bytes", "gauge"],
      ["ledger_nodejs_eventloop_lag_p99_seconds", "gauge"],
      ["ledger_nodejs_eventloop_lag_max_seconds", "gauge"],
      ["ledger_nodejs_gc_duration_seconds", "histogram"],
      ["ledger_db_pool_connections", "gauge"],
      ["ledger_db_pool_idle_connections", "gauge"],
      ["ledger_db_pool_max_connections", "gauge"],
      ["ledger_db_pool_waiting_checkouts", "gauge"],
      ["ledger_db_pool_checkout_wait_seconds", "histogram"],
    ];
    for (const [name, type] of types)
      assert.match(text, new RegExp(`^# TYPE ${name} ${type}$`, "m"), `${name} is a ${type}`);
    assert.ok(
      sample(text, "ledger_process_resident_memory_bytes")! > 10 * 1024 * 1024,
      "resident memory is the process's (more than 10 MiB)",
    );
    assert.ok(sample(text, "ledger_process_cpu_seconds_total")! > 0, "CPU time is counted");
    const p99 = sample(text, "ledger_nodejs_eventloop_lag_p99_seconds")!;
    assert.ok(p99 > 0 && p99 < 5, `event-loop delay p99 in seconds: ${p99}`);
    assert.equal(sample(text, "ledger_db_pool_max_connections"), POOL_SIZE);
    // The start-up reads checked out connections: counted, and none of them waited for another.
    assert.ok(sample(text, "ledger_db_pool_checkout_wait_seconds_count")! > 0, "the start-up's checkouts are counted");
    assert.equal(sample(text, "ledger_db_pool_waiting_checkouts"), 0);
    // Only a process that has a broker connection exports its state (a 0 would read as an outage).
    assert.doesNotMatch(text, /^ledger_nats_connected/m);
    // No default metric without the prefix: the project's names all start with ledger_ (and http_).
    assert.doesNotMatch(text, /^(process|nodejs)_/m);
  },
);

test(
  "runtime metrics: with every pool connection held, one more checkout shows as waiting = 1 on /metrics, and once it gets a connection its wait is in the checkout-wait histogram",
  { timeout: 60_000 },
  async (t) => {
    const { db, scrape } = await startQuietApp(t);
    const held: PoolClient[] = [];
    try {
      await holdAllAndWait(db.pool, held, scrape);
    } finally {
      // Before the app's teardown, whose pool.end() waits for every checked-out connection.
      for (const client of held) client.release();
    }
  },
);

async function holdAllAndWait(pool: Pool, held: PoolClient[], scrape: () => Promise<string>): Promise<void> {
  for (let i = 0; i < POOL_SIZE; i++) held.push(await pool.connect());
  // Control: a pool whose connections are all checked out, and nobody waiting, reads 0.
  const full = await scrape();
  assert.equal(sample(full, "ledger_db_pool_connections"), POOL_SIZE);
  assert.equal(sample(full, "ledger_db_pool_idle_connections"), 0);
  assert.equal(sample(full, "ledger_db_pool_waiting_checkouts"), 0, "no checkout waits yet");
  const countBefore = sample(full, "ledger_db_pool_checkout_wait_seconds_count")!;
  const sumBefore = sample(full, "ledger_db_pool_checkout_wait_seconds_sum")!;

  const pending = pool.connect();
  const asked = performance.now();
  // /metrics answers from the pool's counters with the pool exhausted; polled, never slept on.
  const waiting = await pollUntil(
    "waiting checkouts on /metrics",
    scrape,
    (text) => sample(text, "ledger_db_pool_waiting_checkouts") === 1,
    10_000,
  );
  assert.equal(
    sample(waiting, "ledger_db_pool_checkout_wait_seconds_count"),
    countBefore,
    "a waiting checkout is observed only when it ends",
  );
  const released = performance.now();
  held.pop()!.release();
  held.push(await pending);

  const after = await pollUntil(
    "the checkout-wait histogram",
    scrape,
    (text) => sample(text, "ledger_db_pool_checkout_wait_seconds_count") === countBefore + 1,
    10_000,
  );
  assert.equal(sample(after, "ledger_db_pool_waiting_checkouts"), 0);
  const waitedAtLeast = (released - asked) / 1000;
  const added = sample(after, "ledger_db_pool_checkout_wait_seconds_sum")! - sumBefore;
  assert.ok(
    added >= waitedAtLeast,
    `the wait (${added} s) is at least the time until a connection was released (${waitedAtLeast} s)`,
  );
  // Its bucket: above the largest bound below the wait, where no checkout that did not wait is.
  const bound = [...CHECKOUT_WAIT_BUCKETS].reverse().find((le) => le < waitedAtLeast);
  assert.ok(bound !== undefined, `the wait (${waitedAtLeast} s) is above the first bound`);
  const above = (text: string) =>
    sample(text, "ledger_db_pool_checkout_wait_seconds_count")! -
    sample(text, "ledger_db_pool_checkout_wait_seconds_bucket", `{le="${bound}"}`)!;
  assert.equal(above(after), above(full) + 1, `the checkout that waited is the one more above ${bound} s`);
}
