import { test } from "node:test";
import assert from "node:assert/strict";
import { ok, startApi, type ApiHarness, type Client } from "../api/harness.ts";
import { pollUntil } from "../../support/poll.ts";
import { TestRedisCluster } from "../../support/redis-cluster.ts";

interface CountBody {
  count: number;
  source: "cache" | "database";
}

async function facts(h: ApiHarness, item: string): Promise<number> {
  const { rows } = await h.db.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

/** Likes by `users` over HTTP, each followed by a count read; every status and source is recorded. */
async function load(clients: readonly Client[], item: string, statuses: number[], sources: string[]): Promise<void> {
  await Promise.all(
    clients.map(async (c) => {
      statuses.push((await c.put(`/v1/items/${item}/likes/me`)).status);
      const read = await c.get<CountBody>(`/v1/items/${item}/like-count`);
      statuses.push(read.status);
      if (read.body?.source) sources.push(read.body.source);
    }),
  );
}

/** The masters holding a bucket of `item`, by SCAN on each node. */
async function bucketHolders(cluster: TestRedisCluster, item: string): Promise<number[]> {
  const out: number[] = [];
  for (const port of await cluster.masterPorts())
    if ((await cluster.keysOn(port, `sl:v2:bkt:{likes:${item}#*`)).length > 0) out.push(port);
  return out;
}

/** After a failover: the cluster is healthy, the client sees every master again and a feeder pass goes through. */
async function recovered(cluster: TestRedisCluster, h: ApiHarness): Promise<void> {
  await cluster.waitHealthy();
  // Each read is also a command: after a missed deadline (a loaded machine, the failover) the
  // breaker closes only when a command is answered, and the harness runs no feeder loop that would send one.
  await pollUntil(
    "the count layer sees every master",
    async () => {
      await h.counts.redis!.sendCommand(["PING"]).catch(() => undefined);
      return h.counts.state();
    },
    (s) => s === "up",
    30_000,
    50,
  );
  await pollUntil(
    "a feeder pass succeeds",
    () =>
      h.counts.feed().then(
        () => true,
        () => false,
      ),
    (passed) => passed,
    30_000,
    50,
  );
}

test("HTTP on a Redis Cluster: a manual failover, then kill -9 of a master holding buckets mid-load; no 5xx, reads fall back, and after one reconciliation the count equals the facts", async (t) => {
  const cluster = await TestRedisCluster.start({ nodeTimeoutMs: 2000 });
  t.after(() => cluster.stop());
  const h = await startApi({ partitions: 2, redisUrl: cluster.url });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  await h.counts.feed(); // the feeder's cursor starts at the present
  const users = await Promise.all(Array.from({ length: 100 }, (_, i) => h.as(`user-${i}`)));
  const statuses: number[] = [];
  const sources: string[] = [];

  await load(users.slice(0, 20), "item-1", statuses, sources);
  await h.counts.feed();
  const warm = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.deepEqual([warm.source, warm.count], ["cache", 20]);
  const holders = await bucketHolders(cluster, "item-1");
  assert.ok(holders.length >= 2, `item-1's buckets on ${holders.length} master(s)`);

  // Deterministic: CLUSTER FAILOVER on a replica of a master that holds buckets, while writes and reads go on.
  const first = holders[0]!;
  const promoted = await cluster.replicaOf(first);
  await Promise.all([
    load(users.slice(20, 40), "item-1", statuses, sources),
    cluster.cli(promoted, "CLUSTER", "FAILOVER"),
  ]);
  await cluster.waitMaster(promoted);
  await recovered(cluster, h);
  await load(users.slice(40, 50), "item-1", statuses, sources);
  await h.counts.feed();
  await h.counts.reconcile();
  const afterManual = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.deepEqual([afterManual.source, afterManual.count], ["cache", await facts(h, "item-1")]);
  assert.equal(afterManual.count, 50);

  // kill -9 of a master holding buckets in the middle of a load; its replica takes over.
  const victim = (await bucketHolders(cluster, "item-1"))[0]!;
  const heir = await cluster.replicaOf(victim);
  const during: string[] = [];
  await Promise.all([load(users.slice(50, 70), "item-1", statuses, during), cluster.kill(victim)]);
  // The replica is promoted no sooner than cluster-node-timeout (2 s here) after the kill: until then
  // the victim's buckets do not answer, so a read falls back and a feeder pass fails.
  const downRead = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.equal(downRead.source, "database", "a read that needs a bucket of the dead master falls back to PostgreSQL");
  await assert.rejects(h.counts.feed(), "a feeder pass fails while a master is down");
  await load(users.slice(70, 85), "item-1", statuses, during); // while the failover happens
  await cluster.waitMaster(heir);
  await recovered(cluster, h);
  await load(users.slice(85, 100), "item-1", statuses, sources);
  await h.counts.feed();
  const report = await h.counts.reconcile();
  t.diagnostic(`after the kill: drift repaired ${JSON.stringify(report.flatMap((r) => r.drifted))}`);
  const afterKill = ok(await admin.get<CountBody>("/v1/items/item-1/like-count"));
  assert.deepEqual([afterKill.source, afterKill.count], ["cache", await facts(h, "item-1")]);
  assert.equal(afterKill.count, 100);
  assert.deepEqual(
    statuses.filter((s) => s >= 500),
    [],
    "no 5xx at any point",
  );
  assert.equal(statuses.length, 200);
});
