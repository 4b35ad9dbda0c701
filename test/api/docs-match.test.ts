/**
 * Answers that match what docs/api.md says: a wrong
 * method is 405 with Allow, `me` is never the other account of a relation route, and a post
 * body needs a character that is not whitespace, as a comment's does. Over real HTTP.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, startApi } from "./harness.ts";

test("a method a path does not answer is 405 with Allow; an unknown path stays 404", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const alice = await api.as("alice");
  const wrong = await alice.post("/v1/items/item-1/like-count", {});
  assertError(wrong, 405, "METHOD_NOT_ALLOWED");
  assert.equal(wrong.headers.get("allow"), "GET, HEAD");
  const likes = await api.request("PATCH", "/v1/items/item-1/likes/me", { token: alice.token });
  assertError(likes, 405, "METHOD_NOT_ALLOWED");
  assert.equal(likes.headers.get("allow"), "DELETE, GET, HEAD, PUT");
  assertError(await alice.get("/v1/no-such-route"), 404, "NOT_FOUND");
});

test("`me` as the other account of a relation route is 400 INVALID_INPUT that says so, and writes nothing", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const admin = await api.as("root", { admin: true });
  await admin.put("/v1/accounts/alice", {});
  const alice = await api.as("alice");
  for (const res of [
    await alice.put("/v1/accounts/me/following/me"),
    await alice.put("/v1/accounts/me/blocks/me"),
    await alice.get("/v1/accounts/me/relationships/me"),
    await alice.post("/v1/accounts/me/follow-requests/me/approve"),
  ]) {
    assertError(res, 400, "INVALID_INPUT");
    assert.match((res.body as { error: { message: string } }).error.message, /`me` cannot be the target of this route/);
  }
  const { rows } = await api.db.pool.query("SELECT count(*)::int AS n FROM relation_event");
  assert.equal(rows[0].n, 0, "nothing was written");
});

test("an empty or blank post body is 400 INVALID_INPUT, as a comment's", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const admin = await api.as("root", { admin: true });
  await admin.put("/v1/accounts/alice", {});
  const alice = await api.as("alice");
  for (const body of ["", "   "]) {
    assertError(await alice.post("/v1/posts", { visibility: "PUBLIC", body }), 400, "INVALID_INPUT");
  }
  const post = await alice.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "x" });
  assert.equal(post.status, 201, post.text);
  assertError(await alice.post(`/v1/posts/${post.body.id}/comments`, { body: " " }), 400, "INVALID_INPUT");
  const { rows } = await api.db.pool.query("SELECT count(*)::int AS n FROM post");
  assert.equal(rows[0].n, 1, "only the post with a body was written");
});

test("a tombstone is listed only while a live comment is below it (docs/comments.md): one whose only reply was deleted is not", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const admin = await api.as("root", { admin: true });
  for (const id of ["alice", "bob"]) await admin.put(`/v1/accounts/${id}`, {});
  const [alice, bob] = [await api.as("alice"), await api.as("bob")];
  const post = await alice.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "the post" });
  const comment = async (body: string, parentId?: string) =>
    (await bob.post<{ id: string }>(`/v1/posts/${post.body.id}/comments`, { body, ...(parentId ? { parentId } : {}) }))
      .body.id;
  const listed = async (path: string) =>
    (await alice.get<{ comments: { id: string; deleted: boolean }[] }>(path)).body.comments.map((c) => [
      c.id,
      c.deleted,
    ]);

  const lonely = await comment("its only reply goes");
  const reply = await comment("reply", lonely);
  const chain = await comment("a tombstone above a tombstone above a live reply");
  const middle = await comment("middle", chain);
  const leaf = await comment("leaf", middle);
  for (const id of [reply, lonely, middle, chain]) assert.equal((await bob.delete(`/v1/comments/${id}`)).status, 200);

  assert.deepEqual(
    await listed(`/v1/posts/${post.body.id}/comments`),
    [[chain, true]],
    "the lonely tombstone is gone; the chain's stays",
  );
  assert.deepEqual(await listed(`/v1/comments/${chain}/replies`), [[middle, true]]);
  assert.deepEqual(await listed(`/v1/comments/${middle}/replies`), [[leaf, false]]);
  // Not listed, and as unknown as a comment that never was: nothing live is below it.
  assertError(await alice.get(`/v1/comments/${lonely}/replies`), 404, "COMMENT_NOT_FOUND");
});

test("a token user without an account may follow, block, post and comment as they may like: the first such write creates their account; a failed one creates nothing", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const admin = await api.as("root", { admin: true });
  for (const id of ["bob", "erin"]) await admin.put(`/v1/accounts/${id}`, {});
  assert.equal((await admin.put("/v1/items/item-1")).status, 200);
  const carol = await api.as("carol");
  assert.equal((await carol.put("/v1/items/item-1/likes/me")).status, 200, "like");
  const follow = await carol.put<{ outcome: string; relationship: { following: boolean } }>(
    "/v1/accounts/me/following/bob",
  );
  assert.equal(follow.status, 200, follow.text);
  assert.deepEqual([follow.body.outcome, follow.body.relationship.following], ["CHANGED", true]);
  assert.equal((await carol.put("/v1/accounts/me/blocks/erin")).status, 200, "block");
  const account = await carol.get<{ private: boolean }>("/v1/accounts/carol");
  assert.equal(account.status, 200, account.text);
  assert.equal(account.body.private, false, "created public, with PUT /v1/accounts/{id}'s defaults");

  const dave = await api.as("dave");
  const post = await dave.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "dave's first" });
  assert.equal(post.status, 201, post.text);
  const frank = await api.as("frank");
  assert.equal(
    (await frank.post(`/v1/posts/${post.body.id}/comments`, { body: "frank's first" })).status,
    201,
    "comment",
  );

  // Failed writes of callers without an account create nothing.
  const dora = await api.as("dora");
  assertError(await dora.put("/v1/accounts/me/following/ghost"), 404, "ACCOUNT_NOT_FOUND");
  assertError(await dora.post("/v1/posts", { visibility: "PUBLIC", body: "  " }), 400, "INVALID_INPUT");
  assertError(await dora.post("/v1/posts/no-such-post/comments", { body: "x" }), 404, "POST_NOT_FOUND");
  const { rows } = await api.db.pool.query<{ account_id: string }>(
    "SELECT account_id FROM account ORDER BY account_id",
  );
  assert.deepEqual(
    rows.map((r) => r.account_id),
    ["bob", "carol", "dave", "erin", "frank"],
  );
});

test("a GET route that answers not found itself (a static file that is not there) stays 404, not 405", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  assertError(await api.request("GET", "/dashboard/vendor/uplot/uPlot.d.ts"), 404, "NOT_FOUND");
  const wrong = await api.request("POST", "/dashboard/vendor/uplot/uPlot.min.css");
  assertError(wrong, 405, "METHOD_NOT_ALLOWED");
  assert.equal(wrong.headers.get("allow"), "GET, HEAD");
});
