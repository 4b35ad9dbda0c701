/**
 * Comment counts in the Redis count layer, the third registered counter kind. Over HTTP
 * with a real redis-server: the count of a post comes from Redis (backfilled on its first read,
 * then fed from comment_outbox), replies and tombstones included; an increment lost after the
 * commit (hook point cache.beforeIncrement) is an undercount the reconciliation reports as +1
 * and repairs; `exact=true` answers from PostgreSQL with its error bound.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAccounts, ok, startApi, type ApiHarness } from "../api/harness.ts";
import { TestRedis } from "../../support/redis-server.ts";

interface CountBody {
  count: number;
  source: "cache" | "database";
  reconciledAgeMs?: number;
  pendingForPost?: number;
}

async function counted(h: ApiHarness, postId: string): Promise<number> {
  const { rows } = await h.db.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM counted_comment WHERE post_id = $1",
    [postId],
  );
  return rows[0]!.n;
}

test("comment counts from Redis: backfill, fed increments (replies, tombstones), a lost increment is +1 drift the reconciliation repairs; exact=true reads PostgreSQL", async (t) => {
  const redis = await TestRedis.start();
  t.after(() => redis.kill());
  const h = await startApi({ partitions: 2, redisUrl: redis.url });
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const [alice, bob, carol] = await Promise.all(["alice", "bob", "carol"].map((id) => h.as(id)));
  await h.counts.feed(); // the feeder's cursor starts at the present
  const post = ok<{ id: string }>(await alice!.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const path = `/v1/posts/${post.id}/comment-count`;
  const first = ok<{ id: string }>(await bob!.post(`/v1/posts/${post.id}/comments`, { body: "c0" }), 201);
  ok(await bob!.post(`/v1/posts/${post.id}/comments`, { body: "c1" }), 201);
  await h.counts.feed();
  assert.deepEqual(
    await carol!.get<CountBody>(path).then((r) => [r.body.source, r.body.count]),
    ["cache", 2],
    "backfilled from the facts",
  );

  ok(await carol!.post(`/v1/posts/${post.id}/comments`, { body: "re", parentId: first.id }), 201);
  const gone = ok<{ id: string }>(await carol!.post(`/v1/posts/${post.id}/comments`, { body: "c3" }), 201);
  ok(await carol!.delete(`/v1/comments/${gone.id}`));
  await h.counts.feed();
  assert.deepEqual(
    await carol!.get<CountBody>(path).then((r) => [r.body.source, r.body.count]),
    ["cache", 3],
    "a reply counts, a tombstone does not",
  );
  assert.equal(await counted(h, post.id), 3);

  // The next comment's increment is lost after its commit, as a process dying there would lose it.
  const off = h.counts.hooks.on("cache.beforeIncrement", (c) => {
    if (c.kind === "comments") c.drop = true;
  });
  ok(await bob!.post(`/v1/posts/${post.id}/comments`, { body: "lost" }), 201);
  await h.counts.feed();
  off();
  assert.equal(ok<CountBody>(await carol!.get(path)).count, 3, "the cache missed one");
  const reports = await h.counts.reconcile();
  const comments = reports.find((r) => r.kind === "comments")!;
  assert.deepEqual(
    comments.drifted.map((d) => [d.target, d.drift]),
    [[post.id, 1]],
    "an undercount: +1",
  );
  assert.deepEqual(await carol!.get<CountBody>(path).then((r) => [r.body.source, r.body.count]), ["cache", 4]);
  assert.equal(await counted(h, post.id), 4);

  await h.drain();
  const exact = ok<CountBody>(await carol!.get(`${path}?exact=true&allowedLag=0`));
  assert.deepEqual([exact.source, exact.count, exact.pendingForPost], ["database", 4, 0]);
  const { rows } = await h.db.pool.query<{ drift: number }>(
    "SELECT drift::int AS drift FROM count_drift_history WHERE kind = 'comments'",
  );
  assert.deepEqual(rows, [{ drift: 1 }]);
});
