import { test } from "node:test";
import assert from "node:assert/strict";
import { ok, startApi, type ApiHarness, type Client } from "../api/harness.ts";
import { pollUntil } from "../../support/poll.ts";
import { TestRedis } from "../../support/redis-server.ts";

interface CountBody {
  count: number;
  source: "cache" | "database";
  reconciledAgeMs?: number;
  lag?: number;
}

async function facts(h: ApiHarness, item: string): Promise<number> {
  const { rows } = await h.db.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

async function waitReady(h: ApiHarness): Promise<void> {
  await pollUntil(
    "the Redis client reconnects",
    async () => h.counts.state(),
    (state) => state === "up",
    15_000,
    20,
  );
}

/** Likes by `users` over HTTP, each followed by a count read; every status is recorded. */
async function load(clients: readonly Client[], item: string, statuses: number[], sources: Set<string>): Promise<void> {
  await Promise.all(
    clients.map(async (c) => {
      statuses.push((await c.put(`/v1/items/${item}/likes/me`)).status);
      const read = await c.get<CountBody>(`/v1/items/${item}/like-count`);
      statuses.push(read.status);
      if (read.body?.source) sources.add(read.body.source);
    }),
  );
}

test("HTTP with Redis killed and restarted empty mid-load: no 5xx, reads fall back then backfill, readiness and metrics say degraded, one reconciliation makes counts equal the facts", async (t) => {
  const redis = await TestRedis.start();
  t.after(() => redis.kill());
  const h = await startApi({ partitions: 2, redisUrl: redis.url });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  await h.counts.feed(); // the feeder's cursor starts at the present
  const users = await Promise.all(Array.from({ length: 60 }, (_, i) => h.as(`user-${i}`)));
  const statuses: number[] = [];
  const sources = new Set<string>();

  await load(users.slice(0, 20), "item-1", statuses, sources);
  await h.counts.feed();
  const warm = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.deepEqual([warm.source, warm.count], ["cache", 20]);
  assert.equal(typeof warm.reconciledAgeMs, "number");
  const exact = ok(await admin.get<CountBody>("/v1/items/item-1/like-count?exact=true"));
  assert.equal(exact.source, "database");

  await redis.kill();
  const downSources = new Set<string>();
  const downStatuses: number[] = [];
  await load(users.slice(20, 40), "item-1", downStatuses, downSources);
  assert.deepEqual([...downSources], ["database"], "while Redis is down every count comes from PostgreSQL");
  assert.deepEqual(
    downStatuses.filter((s) => s !== 200),
    [],
    "while Redis is down every write and read answers 200",
  );
  assert.equal(downStatuses.length, 40);
  await assert.rejects(h.counts.feed());
  assert.equal(ok(await h.request<{ counts: string }>("GET", "/readyz")).counts, "degraded");
  const metricsDown = (await h.request("GET", "/metrics")).text;
  assert.match(metricsDown, /^ledger_redis_up 0$/m);
  assert.match(metricsDown, /^ledger_count_cache_update_failures_total\{kind="likes"\} [1-9]/m);
  assert.match(
    metricsDown,
    /^ledger_count_cache_lookups_total\{kind="likes",result="fallback"\} [1-9]/m,
    "reads while Redis is down are fallbacks",
  );

  await redis.restart();
  await waitReady(h);
  await h.counts.feed();
  await load(users.slice(40, 60), "item-1", statuses, sources);
  await h.counts.feed();
  assert.equal(ok(await admin.get<CountBody>("/v1/items/item-1/like-count")).source, "cache");
  await h.counts.reconcile();
  const after = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.deepEqual([after.source, after.count], ["cache", await facts(h, "item-1")]);
  assert.equal(after.count, 60);
  assert.deepEqual(
    statuses.filter((s) => s >= 500),
    [],
    "no 5xx at any point",
  );
  assert.equal(ok(await h.request<{ counts: string }>("GET", "/readyz")).counts, "up");

  const metrics = (await h.request("GET", "/metrics")).text;
  // Seed 004's four numbers: request volume, unique insert rate (CHANGED outcomes), update failures, drift.
  for (const name of [
    "ledger_count_reads_total",
    "ledger_operation_outcomes_total",
    "ledger_count_cache_update_failures_total",
    "ledger_count_drift",
    "ledger_redis_evicted_keys",
  ]) {
    assert.match(metrics, new RegExp(`^# TYPE ${name} `, "m"), `${name} on /metrics`);
  }
  assert.match(metrics, /^ledger_count_reads_total\{kind="likes",source="database"\} [1-9]/m);
  // The dashboard's hit rate: the first read of the counter and the first after the restart backfill (misses), the rest hit.
  for (const result of ["hit", "miss", "fallback"])
    assert.match(
      metrics,
      new RegExp(`^ledger_count_cache_lookups_total\\{kind="likes",result="${result}"\\} [1-9]`, "m"),
    );
});

test("the service refuses a Redis whose maxmemory-policy could evict counts, with a message naming the override", async (t) => {
  const redis = await TestRedis.start(["--maxmemory-policy", "allkeys-lru"]);
  t.after(() => redis.kill());
  await assert.rejects(
    startApi({ redisUrl: redis.url }),
    /maxmemory-policy is allkeys-lru.*LEDGER_REDIS_ALLOW_EVICTION=1/s,
  );
});

test(
  "HTTP with Redis hung (SIGSTOP: the connection stays open, nothing answers): every write and count read answers 200 from PostgreSQL, readiness and redis_up say degraded; once it answers again the counts come from Redis and equal the facts",
  { timeout: 60_000 },
  async (t) => {
    const redis = await TestRedis.start();
    t.after(async () => {
      redis.resume();
      await redis.kill();
    });
    const h = await startApi({ partitions: 2, redisUrl: redis.url });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    ok(await admin.put("/v1/items/item-1"));
    await h.counts.feed();
    const users = await Promise.all(Array.from({ length: 40 }, (_, i) => h.as(`user-${i}`)));
    const warmStatuses: number[] = [];
    await load(users.slice(0, 10), "item-1", warmStatuses, new Set());
    await h.counts.feed();
    assert.equal(ok(await admin.get<CountBody>("/v1/items/item-1/like-count")).source, "cache");

    redis.pause();
    // node-redis drops a command's timeout once it is written: without our deadline these requests never answer.
    const hungStatuses: number[] = [];
    const hungSources = new Set<string>();
    await load(users.slice(10, 30), "item-1", hungStatuses, hungSources);
    assert.deepEqual(
      hungStatuses.filter((s) => s !== 200),
      [],
      "every write and read answers 200 while Redis hangs",
    );
    assert.deepEqual([...hungSources], ["database"]);
    assert.equal(ok(await h.request<{ counts: string }>("GET", "/readyz")).counts, "degraded");
    assert.match((await h.request("GET", "/metrics")).text, /^ledger_redis_up 0$/m);
    await assert.rejects(h.counts.feed());

    redis.resume();
    await pollUntil(
      "count reads come from Redis again",
      async () => (await admin.get<CountBody>("/v1/items/item-1/like-count")).body.source,
      (s) => s === "cache",
      15_000,
      20,
    );
    assert.equal(ok(await h.request<{ counts: string }>("GET", "/readyz")).counts, "up");
    await h.counts.feed();
    await load(users.slice(30, 40), "item-1", warmStatuses, new Set());
    await h.counts.feed();
    await h.counts.reconcile();
    const after = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
    assert.deepEqual([after.source, after.count], ["cache", await facts(h, "item-1")]);
    assert.equal(after.count, 40);
  },
);
