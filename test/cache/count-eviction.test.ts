/**
 * Redis under memory pressure with a volatile-* policy, which the service accepts at
 * start (only allkeys-* is refused). Counters, the feeder's cursor and the reconciled boundary
 * carry no TTL, so such a policy never evicts them; what carries one is the log of increments
 * fed to a counter that is not in Redis yet (EXPIRE 600) and the rate-limit windows. These tests
 * make Redis really evict (evicted_keys > 0, and the exported metric moves) and show that the
 * counts converge to the facts after one reconciliation either way.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import client from "prom-client";
import { Hooks } from "../../src/hooks.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { CacheMetrics } from "../../src/cache/cache-metrics.ts";
import { refresherOf } from "../../src/metrics-refresh.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { connectRedis, evictedKeys, type RedisClient } from "../../src/cache/redis-connection.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

interface Lab {
  db: TestDatabase;
  redis: RedisClient;
  hooks: Hooks;
  likes: LikeService;
  store: CountStore;
  feeder: CountFeeder;
  reader: CountReader;
  reconciler: Reconciler;
  registry: client.Registry;
}

async function lab(t: { after: (fn: () => Promise<void>) => void }, policy: string): Promise<Lab> {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start(["--maxmemory-policy", policy]);
  const redis = await connectRedis(server.url); // a volatile-* policy is accepted at start
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const hooks = new Hooks();
  const registry = new client.Registry();
  const metrics = new CacheMetrics(registry, { up: () => redis.isReady, evictedKeys: () => evictedKeys(redis) });
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(redis, 8);
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS, { hooks, metrics });
  await feeder.pollOnce(); // sets the cursor at the present
  return {
    db,
    redis,
    hooks,
    likes,
    store,
    feeder,
    registry,
    reader: new CountReader(db.pool, store, { localTtlMs: 0, hooks, metrics }),
    reconciler: new Reconciler(db.pool, store, { hooks, metrics }),
  };
}

async function facts(db: TestDatabase, item: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

async function likeMany(likes: LikeService, item: string, from: number, to: number): Promise<void> {
  for (let u = from; u < to; u++) await likes.like(`user-${u}`, item);
}

/** A metric's value on the registry's exposition (as /metrics shows it, after a refresh of the figures read on a timer). */
async function exported(registry: client.Registry, line: RegExp): Promise<number> {
  await refresherOf(registry).refresh();
  const match = line.exec(await registry.metrics());
  return match ? Number(match[1]) : 0;
}

const EVICTED_LINE = /^ledger_redis_evicted_keys (\d+)$/m;

async function usedMemory(redis: RedisClient): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await redis.sendCommand<string>(["INFO", "memory"]))![1]);
}

/** Another application's cache entries sharing the Redis: 10 kB each, with a TTL (so evictable). */
async function writeVolatileFiller(redis: RedisClient, from: number, count: number): Promise<void> {
  const value = "x".repeat(10_000);
  for (let i = from; i < from + count; i++) await redis.sendCommand(["SET", `other-app:${i}`, value, "EX", "3600"]);
}

test("volatile-lru under memory pressure evicts the TTL'd log of increments fed during a backfill: an undercount one reconciliation finds (+3) and repairs; counters (no TTL) are never evicted", async (t) => {
  const l = await lab(t, "volatile-lru");
  await l.likes.createItem("item-a");
  await l.likes.createItem("item-b");
  await likeMany(l.likes, "item-a", 0, 5);
  await likeMany(l.likes, "item-b", 0, 5);
  await l.feeder.pollOnce();
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, 5);
  assert.equal(
    await l.redis.sendCommand<number>(["TTL", l.store.counterKey("likes", "item-b")]),
    -1,
    "a counter carries no TTL",
  );
  assert.equal(await exported(l.registry, EVICTED_LINE), 0);

  // item-a's first read backfills; between its truth read and its install, 3 likes commit and are
  // fed: the counter is absent, so the feeder keeps them in the counter's log (with a TTL) for the
  // install to take; then memory runs short and Redis evicts volatile keys until that log is gone.
  const logKey = l.store.logKey("likes", "item-a");
  let evictions = 0;
  let hookError: unknown;
  const off = l.hooks.on("cache.beforeBackfill", async (c) => {
    if (c.target !== "item-a") return;
    off();
    try {
      await likeMany(l.likes, "item-a", 5, 8);
      await l.feeder.pollOnce();
      assert.equal(
        await l.redis.sendCommand<number>(["HLEN", logKey]),
        8,
        "the 5 earlier likes and these 3: the counter was never read before",
      );
      assert.ok((await l.redis.sendCommand<number>(["TTL", logKey])) > 0, "the log of an absent counter carries a TTL");
      await l.redis.sendCommand(["CONFIG", "SET", "maxmemory", String((await usedMemory(l.redis)) + 1_000_000)]);
      for (let written = 0; await l.redis.sendCommand<number>(["EXISTS", logKey]); written += 50) {
        assert.ok(written < 20_000, "Redis did not evict the log after 20000 volatile writes");
        await writeVolatileFiller(l.redis, written, 50);
      }
      evictions = await evictedKeys(l.redis);
    } catch (err) {
      hookError = err;
    }
  });
  const shown = await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  if (hookError) throw hookError;
  assert.deepEqual([shown.source, shown.count], ["cache", 5], "the evicted log cost 3 increments");
  assert.equal(await facts(l.db, "item-a"), 8);
  assert.ok(evictions > 0, "Redis evicted keys (INFO evicted_keys)");
  assert.ok((await exported(l.registry, EVICTED_LINE)) >= evictions, "ledger_redis_evicted_keys moved");
  t.diagnostic(`note volatile-lru: ${evictions} keys evicted before the log went`);
  assert.equal(
    await l.redis.sendCommand<number>(["EXISTS", l.store.counterKey("likes", "item-b")]),
    1,
    "the counter without TTL survived the pressure",
  );

  const reports = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(
    reports.drifted.map((d) => [d.target, d.drift]),
    [["item-a", 3]],
    "an undercount: the sign says increments were lost",
  );
  for (const item of ["item-a", "item-b"]) {
    const answer = await l.reader.read(LIKE_COUNTS, item, { allowedLag: 0 });
    assert.deepEqual([answer.source, answer.count], ["cache", await facts(l.db, item)], `${item} equals the facts`);
  }
});

test("volatile-random with memory exhausted: volatile keys are evicted, then Redis refuses writes (OOM): the feeder's failures are counted, reads keep answering right counts; once memory is back one reconciliation leaves every count equal to the facts", async (t) => {
  const l = await lab(t, "volatile-random");
  await l.likes.createItem("item-a");
  await l.likes.createItem("item-c");
  await likeMany(l.likes, "item-a", 0, 4);
  await l.feeder.pollOnce();
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 4);
  const withoutFiller = await usedMemory(l.redis);
  await writeVolatileFiller(l.redis, 0, 20);

  // Less than what the keys without TTL need: every volatile key goes and it is still not enough.
  await l.redis.sendCommand(["CONFIG", "SET", "maxmemory", String(withoutFiller - 50_000)]);
  await l.redis.sendCommand(["SET", "other-app:probe", "x"]).catch(() => undefined); // Redis evicts on the next write
  const evictions = await evictedKeys(l.redis);
  assert.ok(evictions > 0, "Redis evicted the volatile keys");
  assert.ok((await exported(l.registry, EVICTED_LINE)) > 0, "ledger_redis_evicted_keys moved");
  assert.equal(
    await l.redis.sendCommand<number>(["EXISTS", l.store.counterKey("likes", "item-a")]),
    1,
    "the counter without TTL was not evicted",
  );

  await likeMany(l.likes, "item-a", 4, 7); // writes are the database's: unaffected
  await likeMany(l.likes, "item-c", 0, 2); // item-c has neither a counter nor a log in Redis
  const failuresBefore = await exported(
    l.registry,
    /^ledger_count_cache_update_failures_total\{kind="likes"\} (\d+)$/m,
  );
  await assert.rejects(l.feeder.pollOnce(), /OOM/);
  assert.ok(
    (await exported(l.registry, /^ledger_count_cache_update_failures_total\{kind="likes"\} (\d+)$/m)) > failuresBefore,
    "counted as update failures",
  );
  const stale = await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  assert.deepEqual(
    [stale.source, stale.count],
    ["cache", 4],
    "a counter already in Redis is still read (reads are allowed)",
  );
  await assert.rejects(l.redis.sendCommand(["SET", "other-app:probe", "x"]), /OOM/, "Redis refuses writes now");
  const fallback = await l.reader.read(LIKE_COUNTS, "item-c", { allowedLag: 0 });
  // Redis 7 refuses a script's first write only when it may grow memory; the install script's
  // first write (PERSIST of the log) does not, so the backfill may go through: either way the
  // answer is right, never a shrunken count.
  if (fallback.source === "cache")
    assert.equal(fallback.count, await facts(l.db, "item-c"), "a backfill under OOM installs the facts");
  t.diagnostic(`note volatile-random, memory exhausted: an absent counter's read answered from ${fallback.source}`);

  await l.redis.sendCommand(["CONFIG", "SET", "maxmemory", "0"]);
  await l.feeder.pollOnce(); // the cursor stayed below the refused increments: they are applied now
  await l.reconciler.reconcile(LIKE_COUNTS);
  for (const item of ["item-a", "item-c"]) {
    const answer = await l.reader.read(LIKE_COUNTS, item, { allowedLag: 0 });
    assert.deepEqual([answer.source, answer.count], ["cache", await facts(l.db, item)], `${item} equals the facts`);
  }
});
