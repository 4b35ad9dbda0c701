import { test } from "node:test";
import assert from "node:assert/strict";
import { readSide, readSideClean, writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { assertError, createAccounts, ok, startApi, type LikedItemPage, type PostJson } from "./harness.ts";

/**
 * Deleting a post. The post becomes a tombstone (body erased) and it and its item
 * are missing for every reader; its like facts, outbox events and counts stay in the ledger
 * (docs/api.md), so the audits still hold.
 */
test("api DELETE /v1/posts/{id}: the author (or an admin) deletes, a repeat is a NOOP; the post, its likes and its count are 404 afterwards; the like facts stay and audit clean", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const carol = await h.as("carol");
  const post = ok(await alice.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "soon gone" }), 201);
  const other = ok(await alice.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "for followers" }), 201);
  ok(await bob.put(`/v1/items/${post.id}/likes/me`));
  ok(await carol.put(`/v1/items/${post.id}/likes/me`));
  await h.drain();
  assert.equal(ok(await bob.get<{ count: number }>(`/v1/items/${post.id}/like-count`)).count, 2);

  assertError(await bob.delete(`/v1/posts/${post.id}`), 403, "FORBIDDEN", "someone who can read it, not the author");
  assertError(await bob.delete(`/v1/posts/${other.id}`), 404, "POST_NOT_FOUND", "someone who cannot read it: missing");
  assertError(await bob.delete("/v1/posts/no-such-post"), 404, "POST_NOT_FOUND");
  assert.deepEqual(ok(await alice.delete(`/v1/posts/${post.id}`)), { id: post.id, outcome: "CHANGED" });
  assert.deepEqual(
    ok(await alice.delete(`/v1/posts/${post.id}`)),
    { id: post.id, outcome: "NOOP" },
    "set-target-state",
  );
  assert.deepEqual(
    ok(await admin.delete(`/v1/posts/${other.id}`)),
    { id: other.id, outcome: "CHANGED" },
    "an admin deletes anyone's",
  );

  const missingItem = await bob.get("/v1/items/no-such-item/likes");
  for (const reader of [alice, bob, carol]) {
    assertError(await reader.get(`/v1/posts/${post.id}`), 404, "POST_NOT_FOUND", `${reader.id} reads the post`);
    const likers = await reader.get(`/v1/items/${post.id}/likes`);
    assertError(likers, 404, "ITEM_NOT_FOUND");
    assert.equal(likers.text, missingItem.text, "a deleted post's item looks like a missing item");
    assertError(await reader.get(`/v1/items/${post.id}/like-count`), 404, "ITEM_NOT_FOUND");
    assertError(await reader.put(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND", "no new like");
    assertError(await reader.delete(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND", "nor an unlike");
  }
  assertError(await h.request("GET", `/v1/posts/${post.id}`), 404, "POST_NOT_FOUND", "without a token");
  assert.deepEqual(
    ok(await bob.get<LikedItemPage>("/v1/accounts/me/likes")),
    { likes: [] },
    "gone from the liker's list",
  );

  // The ledger keeps its history: facts, events and counts unchanged, audits clean; the body is erased.
  const { rows } = await h.db.pool.query<{ facts: number; events: number; n: number; body: string }>(
    `SELECT (SELECT count(*) FROM like_fact WHERE item_id = $1 AND liked)::int AS facts,
            (SELECT count(*) FROM like_outbox WHERE item_id = $1)::int AS events,
            (SELECT sum(n) FROM like_count WHERE item_id = $1)::int AS n,
            (SELECT body FROM post WHERE post_id = $1) AS body`,
    [post.id],
  );
  assert.deepEqual(rows[0], { facts: 2, events: 2, n: 2, body: "" });
  assert.ok(writeSideClean(await writeSide(h.db.pool)));
  assert.ok(readSideClean(await readSide(h.db.pool)));
});
