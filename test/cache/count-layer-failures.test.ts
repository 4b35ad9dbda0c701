/**
 * Ids may contain `:` (src/ids.ts), and under the first key encoding the log
 * of target X (`sl:cnt:<kind>:X:log`) was the counter of target `X:log`, so X's install failed
 * with a Lua error (`sep` nil) that aborted the reconciliation of that kind and of every kind
 * after it, with nothing logged or counted. Here: colliding ids each count exactly; a counter
 * the scripts refuse as malformed (written with direct Redis commands) fails alone, is counted
 * in ledger_count_layer_failures_total{kind, step} and logged, is dropped and backfilled, and the
 * other targets and the following kinds are reconciled in the same run.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import client from "prom-client";
import { openCountLayer, type CountLayer } from "../../src/cache/count-layer.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { FOLLOWER_COUNTS, LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

interface Lab {
  db: TestDatabase;
  ledger: Ledger;
  counts: CountLayer;
  store: CountStore;
  registry: client.Registry;
  logged: { level: string; message: string; fields?: Record<string, unknown> }[];
}

async function lab(t: TestContext): Promise<Lab> {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start();
  const registry = new client.Registry();
  const logged: Lab["logged"] = [];
  const counts = await openCountLayer(db.pool, {
    redisUrl: server.url,
    buckets: 4,
    localTtlMs: 0,
    registry,
    log: (level, message, fields) => logged.push({ level, message, fields }),
  });
  t.after(async () => {
    await counts.close();
    await server.kill();
    await db.close();
  });
  const ledger = await openLedger(db.pool);
  await counts.feed(); // the feeder's cursors start at the present
  return { db, ledger, counts, store: new CountStore(counts.redis!, 4), registry, logged };
}

async function failures(registry: client.Registry, kind: string, step: string): Promise<number> {
  const metric = await registry.getSingleMetric("ledger_count_layer_failures_total")!.get();
  return metric.values.find((v) => v.labels.kind === kind && v.labels.step === step)?.value ?? 0;
}

async function likeFacts(db: TestDatabase, item: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

const read = async (counts: CountLayer, kind: typeof LIKE_COUNTS, target: string) => {
  const r = await counts.reader.read(kind, target, { allowedLag: 0 });
  return [r.source, r.count];
};

test("ids with ':' never share a key: X, X:log and X:log:log each count exactly through backfill, increments and reconciliation", async (t) => {
  const { db, ledger, counts } = await lab(t);
  // Every id here is valid (src/ids.ts allows ':'); each of the last three was another's log key.
  const items = { X: 3, "X:log": 5, "X:log:log": 2, log: 1 };
  for (const item of Object.keys(items)) await ledger.likes.createItem(item);
  let user = 0;
  for (const [item, n] of Object.entries(items))
    for (let i = 0; i < n; i++) await ledger.likes.like(`user-${user++}`, item);
  for (const item of Object.keys(items))
    assert.deepEqual(
      await read(counts, LIKE_COUNTS, item),
      ["cache", items[item as keyof typeof items]],
      `backfill of ${item}`,
    );
  // Increments after the backfill go through each counter's log.
  for (const item of Object.keys(items)) await ledger.likes.like(`user-${user++}`, item);
  await counts.feed();
  for (const item of Object.keys(items))
    assert.deepEqual(await read(counts, LIKE_COUNTS, item), ["cache", await likeFacts(db, item)], `fed ${item}`);
  const reports = await counts.reconcile();
  const likes = reports.find((r) => r.kind === "likes")!;
  assert.deepEqual(
    [likes.visited, likes.installed, likes.drifted, likes.failed],
    [4, 4, [], []],
    "every counter reconciled, none drifted or failed",
  );
  for (const item of Object.keys(items))
    assert.deepEqual(
      await read(counts, LIKE_COUNTS, item),
      ["cache", items[item as keyof typeof items] + 1],
      `reconciled ${item}`,
    );
});

test("a malformed counter fails alone: the other targets and the following kind are reconciled, the failure is counted and logged, the counter is backfilled", async (t) => {
  const { db, ledger, counts, store, registry, logged } = await lab(t);
  for (const item of ["item-a", "item-b", "item-c"]) await ledger.likes.createItem(item);
  for (const a of ["alice", "bob", "carol", "dave"]) await ledger.relations.upsertAccount(a);
  for (const item of ["item-a", "item-b", "item-c"]) await read(counts, LIKE_COUNTS, item);
  await read(counts, FOLLOWER_COUNTS, "alice");
  for (let u = 0; u < 3; u++) await ledger.likes.like(`user-${u}`, "item-a");
  for (let u = 0; u < 2; u++) await ledger.likes.like(`user-${u}`, "item-b");
  await ledger.likes.like("user-0", "item-c");
  await ledger.relations.follow("bob", "alice");
  await ledger.relations.follow("carol", "alice");
  await counts.feed();
  // Control: a clean run fails nothing and counts nothing.
  await counts.reconcile();
  assert.equal(await failures(registry, "likes", "install"), 0, "a clean run counts no failure");

  // Drift that only a reconciliation repairs: item-b and alice overcounted by direct increments.
  await counts.redis!.sendCommand(["HINCRBY", store.counterKey("likes", "item-b"), "b0", "4"]);
  await counts.redis!.sendCommand(["HINCRBY", store.counterKey("followers", "alice"), "b0", "1"]);
  // item-a's log gets an entry that is not `<part>:<seq>`; item-c's counter, in the bucket user-9's like goes to, no integer.
  await counts.redis!.sendCommand(["HSET", store.logKey("likes", "item-a"), "garbage", "1"]);
  await counts.redis!.sendCommand([
    "HSET",
    store.counterKey("likes", "item-c"),
    `b${store.bucketOf("user-9")}`,
    "not-a-number",
  ]);
  // Every target changes, so the run visits them all (likes first, then followers).
  for (const item of ["item-a", "item-b", "item-c"]) await ledger.likes.like("user-9", item);
  await ledger.relations.follow("dave", "alice");
  await counts.feed();
  assert.equal(
    await failures(registry, "likes", "increment"),
    1,
    "item-c's increment was refused as malformed, and the pass went on",
  );

  const reports = await counts.reconcile();
  const likes = reports.find((r) => r.kind === "likes")!;
  const followers = reports.find((r) => r.kind === "followers")!;
  t.diagnostic(`note likes: ${JSON.stringify(likes)}`);
  assert.deepEqual(
    likes.failed.map((f) => [f.target, f.dropped]),
    [["item-a", true]],
  );
  assert.match(likes.failed[0]!.reason, /malformed.*garbage/);
  assert.deepEqual(
    likes.drifted.map((d) => [d.target, d.drift]),
    [["item-b", -4]],
    "the target after the failed one was reconciled",
  );
  assert.deepEqual(
    followers.drifted.map((d) => [d.target, d.drift]),
    [["alice", -1]],
    "the kind after the failed target was reconciled",
  );
  assert.equal(await failures(registry, "likes", "install"), 1);
  assert.equal(await failures(registry, "followers", "install"), 0);
  assert.ok(
    logged.some((l) => l.level === "warn" && l.fields?.target === "item-a" && l.fields?.step === "install"),
    JSON.stringify(logged),
  );
  assert.ok(
    logged.some((l) => l.level === "warn" && l.fields?.target === "item-c" && l.fields?.step === "increment"),
    JSON.stringify(logged),
  );

  // The dropped counters are backfilled from the facts; the others show the repaired counts.
  for (const item of ["item-a", "item-b", "item-c"])
    assert.deepEqual(await read(counts, LIKE_COUNTS, item), ["cache", await likeFacts(db, item)], item);
  assert.deepEqual(await read(counts, FOLLOWER_COUNTS, "alice"), ["cache", 3]);
});

test("a read that finds a malformed counter drops it and answers the backfilled truth (never NaN), counted as step read", async (t) => {
  const { ledger, counts, store, registry } = await lab(t);
  await ledger.likes.createItem("item-a");
  for (let u = 0; u < 4; u++) await ledger.likes.like(`user-${u}`, "item-a");
  assert.deepEqual(await read(counts, LIKE_COUNTS, "item-a"), ["cache", 4]);
  await counts.redis!.sendCommand(["HSET", store.counterKey("likes", "item-a"), "b2", "1.5"]);
  assert.deepEqual(await read(counts, LIKE_COUNTS, "item-a"), ["cache", 4]);
  assert.equal(await failures(registry, "likes", "read"), 1);
});
