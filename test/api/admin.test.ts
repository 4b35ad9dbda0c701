import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type LikeCount } from "./harness.ts";

interface Status {
  partitions: number;
  views: {
    view: "like_count" | "follower_projection" | "comment_count";
    part: number;
    last: number;
    appliedUpto: number;
    lag: number;
  }[];
  transactionRetries: number;
}
interface Audit {
  clean: boolean;
  likes: { writeSide: Record<string, number>; readSide: Record<string, number | boolean> };
  relations: { invariants: unknown; projectionCaughtUp: boolean; projectionDiff: Record<string, number> | null };
}
interface Rebuild {
  runId: number;
  snapshotSeqs: number[];
  itemsChecked: number;
  drifted: { itemId: string; oldN: number; newN: number; drift: number; skippedPartitions: number[] }[];
  totalAbsDrift: number;
}

test("api P=4 admin: status lists both views per partition with lag, audit is clean after a drain, rebuild reports no drift on a healthy ledger and finds and repairs a corrupted count", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const users = Array.from({ length: 12 }, (_, i) => `user-${String(i + 1).padStart(2, "0")}`);
  await createAccounts(admin, ["star", ...users]);
  for (const item of ["item-a", "item-b", "item-c"]) ok(await admin.put(`/v1/items/${item}`));
  let likes = 0;
  for (const [i, u] of users.entries()) {
    const c = await h.as(u);
    ok(await c.put("/v1/items/item-a/likes/me"));
    likes++;
    if (i % 2 === 0) {
      ok(await c.put("/v1/items/item-b/likes/me"));
      likes++;
    }
    ok(await c.put("/v1/accounts/me/following/star"));
  }
  ok(await (await h.as("user-01")).delete("/v1/items/item-b/likes/me"));
  likes++;

  const before = ok(await admin.get<Status>("/v1/admin/status"));
  assert.equal(before.partitions, 4);
  assert.deepEqual(before.views.map((v) => `${v.view}/${v.part}`).sort(), [
    "comment_count/0",
    "comment_count/1",
    "comment_count/2",
    "comment_count/3",
    "follower_projection/0",
    "follower_projection/1",
    "follower_projection/2",
    "follower_projection/3",
    "like_count/0",
    "like_count/1",
    "like_count/2",
    "like_count/3",
  ]);
  for (const v of before.views) {
    assert.deepEqual(Object.keys(v).sort(), ["appliedUpto", "lag", "last", "part", "view"]);
    assert.equal(v.lag, v.last - v.appliedUpto);
    assert.equal(v.appliedUpto, 0, "no consumer has run");
  }
  const lagOf = (s: Status, view: string) => s.views.filter((v) => v.view === view).reduce((n, v) => n + v.lag, 0);
  assert.equal(lagOf(before, "like_count"), likes);
  assert.equal(lagOf(before, "follower_projection"), users.length, "all follows are in star's partition");
  assert.equal(before.views.filter((v) => v.view === "follower_projection" && v.lag > 0).length, 1);
  assert.equal(typeof before.transactionRetries, "number");

  const lagging = ok(await admin.get<Audit>("/v1/admin/audit"));
  assert.equal(lagging.clean, true, "lag is not a violation");
  assert.equal(lagging.relations.projectionCaughtUp, false);
  assert.equal(lagging.relations.projectionDiff, null);

  await h.drain();
  const after = ok(await admin.get<Status>("/v1/admin/status"));
  assert.ok(
    after.views.every((v) => v.lag === 0 && v.appliedUpto === v.last),
    JSON.stringify(after.views),
  );
  const audit = ok(await admin.get<Audit>("/v1/admin/audit"));
  t.diagnostic(`note audit after drain: clean=${audit.clean} writeSide=${JSON.stringify(audit.likes.writeSide)}`);
  assert.equal(audit.clean, true);
  assert.equal(audit.relations.projectionCaughtUp, true);
  assert.ok(audit.relations.projectionDiff && Object.values(audit.relations.projectionDiff).every((n) => n === 0));
  assert.equal(audit.likes.readSide.lag, 0);

  const healthy = ok(await admin.post<Rebuild>("/v1/admin/rebuild"));
  assert.deepEqual(Object.keys(healthy).sort(), ["drifted", "itemsChecked", "runId", "snapshotSeqs", "totalAbsDrift"]);
  assert.deepEqual(
    { drifted: healthy.drifted, totalAbsDrift: healthy.totalAbsDrift },
    { drifted: [], totalAbsDrift: 0 },
  );
  assert.equal(healthy.snapshotSeqs.length, 4);
  assert.ok(healthy.itemsChecked >= 2, `items checked: ${healthy.itemsChecked}`);

  // Corrupt one count behind the ledger's back: the audit sees it, the rebuild reports and repairs it.
  await h.db.pool.query(
    "UPDATE like_count SET n = n + 5 WHERE item_id = 'item-a' AND part = (SELECT min(part) FROM like_count WHERE item_id = 'item-a')",
  );
  const reader = await h.as("user-02");
  assert.equal(ok(await reader.get<LikeCount>("/v1/items/item-a/like-count")).count, users.length + 5);
  const corrupted = ok(await admin.get<Audit>("/v1/admin/audit"));
  assert.equal(corrupted.clean, false);
  t.diagnostic(`note audit after corruption: readSide=${JSON.stringify(corrupted.likes.readSide)}`);
  const report = ok(await admin.post<Rebuild>("/v1/admin/rebuild", { items: ["item-a", "item-b", "item-c"] }));
  t.diagnostic(`note rebuild report: ${JSON.stringify(report)}`);
  assert.equal(report.runId, healthy.runId + 1);
  assert.equal(report.itemsChecked, 3, "every item asked for");
  assert.deepEqual(
    report.drifted.map(({ itemId, oldN, newN, drift, skippedPartitions }) => ({
      itemId,
      oldN,
      newN,
      drift,
      skippedPartitions,
    })),
    [{ itemId: "item-a", oldN: users.length + 5, newN: users.length, drift: -5, skippedPartitions: [] }],
  );
  assert.equal(report.totalAbsDrift, 5);
  assert.equal(ok(await admin.get<Audit>("/v1/admin/audit")).clean, true, "clean again after the rebuild");
  assert.deepEqual(ok(await reader.get("/v1/items/item-a/like-count?allowedLag=0")), {
    count: users.length,
    lag: 0,
    pendingForItem: 0,
    stale: false,
    source: "database",
  });
  assert.deepEqual(ok(await reader.get("/v1/items/item-b/like-count?allowedLag=0")), {
    count: users.length / 2 - 1,
    lag: 0,
    pendingForItem: 0,
    stale: false,
    source: "database",
  });
  await h.app.metrics.refresh(); // the figures from the database are read on a timer, not by the scrape
  const metrics = (await h.request("GET", "/metrics")).text;
  assert.match(metrics, /^ledger_rebuild_drift_abs_total 5$/m);
  assert.match(metrics, /^ledger_rebuild_drifted_items_total 1$/m);

  assertError(await admin.post("/v1/admin/rebuild", { items: ["item-a", "no-such-item"] }), 404, "ITEM_NOT_FOUND");
  assertError(await admin.post("/v1/admin/rebuild", { items: "item-a", extra: 1 }), 400, "INVALID_INPUT");
});

interface CommentRebuild {
  runId: number;
  snapshotSeqs: number[];
  postsChecked: number;
  drifted: { postId: string; oldN: number; newN: number; drift: number; skippedPartitions: number[] }[];
  totalAbsDrift: number;
}

test("api admin: the comment counts' rebuild reports and repairs a corrupted count with its sign, feeds the shared drift figures, and is admin-only", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const post = ok<{ id: string }>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const other = ok<{ id: string }>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "other" }), 201);
  for (let i = 0; i < 4; i++) ok(await bob.post(`/v1/posts/${post.id}/comments`, { body: `c${i}` }), 201);
  ok(await bob.post(`/v1/posts/${other.id}/comments`, { body: "x" }), 201);
  await h.drain();

  const healthy = ok<CommentRebuild>(await admin.post("/v1/admin/comment-counts/rebuild"));
  assert.deepEqual(
    { drifted: healthy.drifted, totalAbsDrift: healthy.totalAbsDrift, parts: healthy.snapshotSeqs.length },
    { drifted: [], totalAbsDrift: 0, parts: 4 },
  );
  assert.ok(healthy.postsChecked >= 2, `posts checked: ${healthy.postsChecked}`);

  // An undercount (a lost increment): the count shows 2 of 4 comments.
  await h.db.pool.query(
    "UPDATE comment_count SET n = n - 2 WHERE post_id = $1 AND part = (SELECT min(part) FROM comment_count WHERE post_id = $1)",
    [post.id],
  );
  assert.equal(ok<{ count: number }>(await bob.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`)).count, 2);
  assert.equal(
    ok<{ clean: boolean }>(await admin.get("/v1/admin/audit")).clean,
    false,
    "the audit sees the corruption",
  );

  assertError(await bob.post("/v1/admin/comment-counts/rebuild"), 403, "FORBIDDEN");
  assertError(
    await admin.post("/v1/admin/comment-counts/rebuild", { posts: [post.id, "no-such-post"] }),
    404,
    "POST_NOT_FOUND",
  );
  assertError(await admin.post("/v1/admin/comment-counts/rebuild", { items: [post.id] }), 400, "INVALID_INPUT");
  assert.equal(
    ok<{ count: number }>(await bob.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`)).count,
    2,
    "refused requests repaired nothing",
  );

  const report = ok<CommentRebuild>(
    await admin.post("/v1/admin/comment-counts/rebuild", { posts: [post.id, other.id] }),
  );
  assert.equal(report.runId, healthy.runId + 1);
  assert.equal(report.postsChecked, 2);
  assert.deepEqual(report.drifted, [{ postId: post.id, oldN: 2, newN: 4, drift: 2, skippedPartitions: [] }]);
  assert.equal(report.totalAbsDrift, 2);
  assert.equal(ok<{ count: number }>(await bob.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`)).count, 4);
  assert.equal(ok<{ clean: boolean }>(await admin.get("/v1/admin/audit")).clean, true, "clean again after the rebuild");
  await h.app.metrics.refresh(); // the figures from the database are read on a timer, not by the scrape
  const metrics = (await h.request("GET", "/metrics")).text;
  assert.match(
    metrics,
    /^ledger_count_drift_count\{kind="comments",sign="under",origin="rebuild"\} 1$/m,
    "the drift is in the shared figures with its kind and sign",
  );
});
