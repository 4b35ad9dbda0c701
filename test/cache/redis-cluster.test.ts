import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Gate, Hooks } from "../../src/hooks.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { connectRedis, parseClusterUrl, RedisUrlError, routingKey, type RedisClient } from "../../src/cache/redis-connection.ts";
import { naiveRecountAndOverwrite } from "../../src/cache/negative-controls.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { TestRedisCluster } from "../support/redis-cluster.ts";

// One cluster (3 masters, 3 replicas) for the store tests of this file; each test flushes it.
// The failover tests (test/cache/redis-cluster-failover.test.ts) start their own.
let cluster: TestRedisCluster;
before(async () => {
  cluster = await TestRedisCluster.start();
});
after(async () => {
  await cluster?.stop();
});

interface Lab {
  db: TestDatabase;
  redis: RedisClient;
  hooks: Hooks;
  likes: LikeService;
  store: CountStore;
  feeder: CountFeeder;
  reader: CountReader;
  reconciler: Reconciler;
}

async function lab(t: { after: (fn: () => Promise<void>) => void }): Promise<Lab> {
  const db = await createTestDatabase({ partitions: 2 });
  const redis = await connectRedis(cluster.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await db.close();
  });
  assert.equal(redis.topology, "cluster");
  await redis.flushAll();
  const hooks = new Hooks();
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(redis, 16, { hooks });
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS, { hooks });
  await feeder.pollOnce(); // sets the cursor at the present
  return {
    db, redis, hooks, likes, store, feeder,
    reader: new CountReader(db.pool, store, { localTtlMs: 0 }), reconciler: new Reconciler(db.pool, store, { hooks }),
  };
}

async function facts(db: TestDatabase, item: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::bigint AS n FROM like_fact WHERE item_id = $1 AND liked", [item]);
  return rows[0]!.n;
}

async function likeMany(likes: LikeService, item: string, from: number, to: number): Promise<void> {
  for (let u = from; u < to; u++) await likes.like(`user-${u}`, item);
}

/** The masters that store at least one key matching `pattern` (SCAN on each node: what it really holds). */
async function holders(pattern: string): Promise<number[]> {
  const out: number[] = [];
  for (const port of await cluster.masterPorts()) if ((await cluster.keysOn(port, pattern)).length > 0) out.push(port);
  return out;
}

test("on a Redis Cluster the buckets of one hot item are keys on at least two masters, and a read sums them", async (t) => {
  const { db, likes, store, feeder, reader } = await lab(t);
  await likes.createItem("item-hot");
  await likeMany(likes, "item-hot", 0, 10);
  assert.deepEqual(await reader.read(LIKE_COUNTS, "item-hot", { allowedLag: 0 }).then((r) => [r.source, r.count]), ["cache", 10]);
  await likeMany(likes, "item-hot", 10, 80);
  await likes.unlike("user-3", "item-hot");
  await feeder.pollOnce();
  const read = await reader.read(LIKE_COUNTS, "item-hot", { allowedLag: 0 });
  assert.deepEqual([read.source, read.count], ["cache", await facts(db, "item-hot")]);
  assert.equal(read.count, 79);

  const bucketHolders = await holders("sl:cnt:{likes:item-hot#*");
  t.diagnostic(`16 buckets of item-hot on masters ${bucketHolders.join(", ")} of ${(await cluster.masterPorts()).join(", ")}`);
  assert.ok(bucketHolders.length >= 2, `buckets on ${bucketHolders.length} master(s)`);
  const used = new Set(await Promise.all(Array.from({ length: 16 }, (_, i) => cluster.cli(bucketHolders[0]!, "CLUSTER", "KEYSLOT", store.bucketKey("likes", "item-hot", i)))));
  assert.ok(used.size > 1, "every bucket key has a slot of its own hash tag");

  // Negative control of the measure: keys that share one hash tag (what the single-node hash
  // amounts to on a cluster) are all found on one master, so the check above can fail.
  for (let i = 0; i < 16; i++) await store.redis.sendCommand(["SET", `sl:shared:{likes:item-hot}#${i}`, "1"]);
  assert.equal((await holders("sl:shared:{likes:item-hot}#*")).length, 1);
});

test("on a cluster a lost increment is +1 drift and a replayed one -1; one reconciliation repairs both; a second visits nothing", async (t) => {
  const { db, redis, hooks, likes, store, feeder, reader, reconciler } = await lab(t);
  await likes.createItem("item-a");
  await likes.createItem("item-b");
  await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 });
  await likeMany(likes, "item-a", 0, 5);
  await likeMany(likes, "item-b", 0, 5);
  hooks.on("cache.beforeIncrement", (c) => {
    if (c.target === "item-a" && c.actor === "user-3") c.drop = true;
  });
  hooks.on("cache.afterIncrement", async (c) => {
    // A blind replay of the same increment (what an offline queue would do after a reconnect).
    if (c.target === "item-b" && c.actor === "user-2") await redis.sendCommand(["HINCRBY", store.bucketKey("likes", "item-b", store.bucketOf("user-2")), "d", "1"]);
  });
  await feeder.pollOnce();
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 4);
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, 6);
  const report = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(Object.fromEntries(report.drifted.map((d) => [d.target, d.drift])), { "item-a": 1, "item-b": -1 });
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(db, "item-a"));
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, await facts(db, "item-b"));
  const again = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([again.visited, again.drifted.length], [0, 0]);
});

test("a bucket lost by its node (the base still there) is noticed by the read and backfilled: no count silently shrinks", async (t) => {
  const { db, likes, store, feeder, reader } = await lab(t);
  await likes.createItem("item-c");
  await reader.read(LIKE_COUNTS, "item-c", { allowedLag: 0 });
  await likeMany(likes, "item-c", 0, 30);
  await feeder.pollOnce();
  const lost = store.bucketOf("user-0");
  await store.redis.sendCommand(["DEL", store.bucketKey("likes", "item-c", lost), `${store.bucketKey("likes", "item-c", lost)}:log`]);
  assert.equal(await store.read("likes", "item-c"), undefined, "a missing bucket makes the counter absent");
  assert.deepEqual(await reader.read(LIKE_COUNTS, "item-c", { allowedLag: 0 }).then((r) => [r.source, r.count]), ["cache", await facts(db, "item-c")]);
});

/** A repair parked at `point` while 20 more likes commit and are fed; what the counter shows in the gap and afterwards. */
async function repairRacingWriters(l: Lab, point: string, repair: () => Promise<unknown>): Promise<{ inGap: number; shownInGap: number; shown: number; truth: number }> {
  const gate = new Gate(point);
  const off = l.hooks.on(point, gate.handler);
  const running = repair();
  await gate.waitArrived();
  await likeMany(l.likes, "item-r", 100, 120);
  await l.feeder.pollOnce();
  const shownInGap = (await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count;
  const inGap = await facts(l.db, "item-r");
  gate.release();
  await running;
  off();
  return { inGap, shownInGap, shown: (await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count, truth: await facts(l.db, "item-r") };
}

test("negative control on a cluster: the naive recount-and-overwrite loses increments made during it; the per-bucket freeze then base install loses none, and reads in between are exact", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-r");
  await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 });
  await likeMany(l.likes, "item-r", 0, 10);
  await l.feeder.pollOnce();
  const naive = await repairRacingWriters(l, "reconcile.beforeInstall", () => naiveRecountAndOverwrite(l.db.pool, l.store, LIKE_COUNTS, "item-r", l.hooks));
  assert.equal(naive.truth - naive.shown, 20, `naive overwrite lost ${naive.truth - naive.shown} increments`);
  await l.reconciler.reconcile(LIKE_COUNTS); // repairs what the naive run lost
  await likeMany(l.likes, "item-r", 200, 202); // a change, so the next run visits item-r
  await l.feeder.pollOnce();
  // Parked after every bucket is frozen and before the base is installed: the widest gap of the split install.
  const split = await repairRacingWriters(l, "cache.afterFreeze", () => l.reconciler.reconcile(LIKE_COUNTS));
  assert.equal(split.shownInGap, split.inGap, "between the freezes and the base install a read is exact");
  assert.equal(split.shown, split.truth, "the split reconciliation lost nothing");
});

test("REDIS_URL for a cluster: seed nodes, credentials and TLS are read; a URL without nodes or with a bad port is a typed error; EVAL routes by its first key", () => {
  assert.equal(parseClusterUrl("redis://127.0.0.1:6390"), undefined, "a plain URL is one node");
  assert.deepEqual(parseClusterUrl("rediss+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2"), {
    tls: true, username: "app", password: "s@cret", nodes: [{ host: "10.0.0.1", port: 7000 }, { host: "10.0.0.2", port: 6379 }],
  });
  assert.throws(() => parseClusterUrl("redis+cluster://"), (err: unknown) => err instanceof RedisUrlError && /at least one host:port/.test(err.message));
  assert.throws(() => parseClusterUrl("redis+cluster://h:70000"), (err: unknown) => err instanceof RedisUrlError && err.code === "REDIS_URL_INVALID");
  assert.equal(routingKey(["EVAL", "return 1", "2", "k1", "k2", "a"]), "k1");
  assert.equal(routingKey(["HGET", "k", "f"]), "k");
});
