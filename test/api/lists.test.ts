import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type BlockPage,
  type FollowerPage,
  type FollowingPage,
  type LikedItemPage,
  type Profile,
  type Relationship,
  type RelationOutcome,
} from "./harness.ts";

/** What a client needs beyond writes: the lists, the profile, batch relationships, writes that answer the relationship. */

const NOTHING: Relationship = {
  following: false,
  requested: false,
  followedBy: false,
  requestedBy: false,
  blocking: false,
};

test("api following, my blocks and my likes: newest first, exact at once (from the truth), paged with a body cursor and Link rel=next", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const others = ["a1", "a2", "a3", "a4", "a5"];
  await createAccounts(admin, ["alice", ...others]);
  await createAccounts(admin, ["locked"], { private: true });
  const alice = await h.as("alice");
  for (const id of others.slice(0, 4))
    assert.equal(ok(await alice.put<RelationOutcome>(`/v1/accounts/me/following/${id}`)).state, "ACTIVE");
  ok(await alice.put("/v1/accounts/me/following/locked"));
  ok(await alice.delete("/v1/accounts/me/following/a2"));

  // Following: ACTIVE only (no request, no unfollowed), no projector run needed.
  const following = ok(await alice.get<FollowingPage>("/v1/accounts/alice/following"));
  assert.deepEqual(
    following.following.map((f) => f.accountId),
    ["a4", "a3", "a1"],
  );
  assert.equal(following.nextCursor, undefined);
  assert.deepEqual(ok(await alice.get<FollowingPage>("/v1/accounts/me/following")), following, "me is the caller");
  const first = await alice.get<FollowingPage>("/v1/accounts/alice/following?limit=2");
  const page1 = ok(first);
  assert.deepEqual(
    page1.following.map((f) => f.accountId),
    ["a4", "a3"],
  );
  assert.equal(
    first.headers.get("link"),
    `</v1/accounts/alice/following?limit=2&cursor=${page1.nextCursor}>; rel="next"`,
  );
  const page2 = ok(await alice.get<FollowingPage>(`/v1/accounts/alice/following?limit=2&cursor=${page1.nextCursor}`));
  assert.deepEqual(page2, { following: [following.following[2]!] });

  // My blocks.
  ok(await alice.put("/v1/accounts/me/blocks/a5"));
  ok(await alice.put("/v1/accounts/me/blocks/a1"));
  const blocks = ok(await alice.get<BlockPage>("/v1/accounts/me/blocks"));
  assert.deepEqual(
    blocks.blocks.map((b) => b.accountId),
    ["a1", "a5"],
  );
  assert.deepEqual(
    ok(await alice.get<FollowingPage>("/v1/accounts/alice/following")).following.map((f) => f.accountId),
    ["a4", "a3"],
    "a block removed the follow",
  );
  ok(await alice.delete("/v1/accounts/me/blocks/a5"));
  assert.deepEqual(
    ok(await alice.get<BlockPage>("/v1/accounts/me/blocks")).blocks.map((b) => b.accountId),
    ["a1"],
  );
  assert.deepEqual(
    ok(await (await h.as("a1")).get<BlockPage>("/v1/accounts/me/blocks")),
    { blocks: [] },
    "only the blocker's list",
  );

  // My likes.
  for (const item of ["item-1", "item-2", "item-3"]) ok(await admin.put(`/v1/items/${item}`));
  for (const item of ["item-1", "item-2", "item-3"]) ok(await alice.put(`/v1/items/${item}/likes/me`));
  ok(await alice.delete("/v1/items/item-2/likes/me"));
  const likes = await alice.get<LikedItemPage>("/v1/accounts/me/likes?limit=1");
  assert.deepEqual(
    ok(likes).likes.map((l) => l.itemId),
    ["item-3"],
  );
  assert.match(
    likes.headers.get("link") ?? "",
    /^<\/v1\/accounts\/me\/likes\?limit=1&cursor=[A-Za-z0-9_-]+>; rel="next"$/,
  );
  assert.deepEqual(
    ok(await alice.get<LikedItemPage>("/v1/accounts/me/likes")).likes.map((l) => l.itemId),
    ["item-3", "item-1"],
  );
});

test("api profile: private flag, hideCollections, and counts (followers from the projection with its lag, following from the truth)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  await createAccounts(admin, ["locked"], { private: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  ok(await bob.put("/v1/accounts/me/following/alice"));
  ok(await (await h.as("carol")).put("/v1/accounts/me/following/alice"));
  ok(await alice.put("/v1/accounts/me/following/bob"));
  const stale = ok(await bob.get<Profile>("/v1/accounts/alice?allowedLag=0"));
  assert.deepEqual(
    { ...stale, counts: { ...stale.counts!, lag: 0 } },
    {
      id: "alice",
      private: false,
      hideCollections: false,
      counts: { followers: 0, following: 1, lag: 0, stale: true },
    },
    "before the projector runs: following is exact, followers lag and say so",
  );
  assert.ok(stale.counts!.lag >= 2);
  await h.drain();
  assert.deepEqual(ok(await bob.get<Profile>("/v1/accounts/alice")), {
    id: "alice",
    private: false,
    hideCollections: false,
    counts: { followers: 2, following: 1, lag: 0, stale: false },
  });
  assert.deepEqual(
    ok(await alice.get<Profile>("/v1/accounts/me")),
    ok(await bob.get<Profile>("/v1/accounts/alice")),
    "me is the caller",
  );
  assert.equal(ok(await bob.get<Profile>("/v1/accounts/locked")).private, true);
  assertError(await bob.get("/v1/accounts/ghost"), 404, "ACCOUNT_NOT_FOUND");
});

test("api hideCollections: others (and anonymous readers) get 403 COLLECTIONS_HIDDEN for followers, following and the follower count, and a profile without counts; the account itself sees all; blocked users never see the lists (404)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "enemy"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const enemy = await h.as("enemy");
  ok(await bob.put("/v1/accounts/me/following/alice"));
  ok(await alice.put("/v1/accounts/me/following/bob"));
  await h.drain();

  const lists = ["/v1/accounts/alice/followers", "/v1/accounts/alice/following", "/v1/accounts/alice/follower-count"];
  for (const path of lists) ok(await bob.get(path), 200, `${path} while not hidden`);
  assert.deepEqual(ok(await alice.put("/v1/accounts/alice", { hideCollections: true })), {
    id: "alice",
    private: false,
    hideCollections: true,
  });
  for (const path of lists) {
    assertError(await bob.get(path), 403, "COLLECTIONS_HIDDEN", `${path} for another user`);
    assertError(await h.request("GET", path), 403, "COLLECTIONS_HIDDEN", `${path} without a token`);
    ok(await alice.get(path), 200, `${path} for the account itself`);
    ok(await admin.get(path), 200, `${path} for an admin`);
  }
  assert.deepEqual(
    ok(await bob.get<Profile>("/v1/accounts/alice")),
    { id: "alice", private: false, hideCollections: true },
    "no counts for another user",
  );
  assert.ok(ok(await alice.get<Profile>("/v1/accounts/alice")).counts, "the account sees its own counts");
  assert.deepEqual(
    ok(await alice.get<FollowerPage>("/v1/accounts/alice/followers")).followers.map((f) => f.accountId),
    ["bob"],
  );

  // Blocked users never see the lists of an account that does not hide them either.
  ok(await bob.put("/v1/accounts/me/blocks/enemy"));
  for (const path of [
    "/v1/accounts/bob/followers",
    "/v1/accounts/bob/following",
    "/v1/accounts/bob/follower-count",
    "/v1/accounts/bob",
  ]) {
    assertError(await enemy.get(path), 404, "ACCOUNT_NOT_FOUND", `${path} for a blocked user`);
    ok(await alice.get(path), 200, `${path} for anyone else`);
  }
  assertError(
    await bob.get("/v1/accounts/enemy/following"),
    404,
    "ACCOUNT_NOT_FOUND",
    "nor does the blocker see the blocked user's",
  );

  // Unhiding restores them; the flag changes nothing in the follow graph.
  ok(await alice.put("/v1/accounts/alice", { hideCollections: false }));
  assert.deepEqual(
    ok(await bob.get<FollowingPage>("/v1/accounts/alice/following")).following.map((f) => f.accountId),
    ["bob"],
  );
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM relation_event");
  assert.equal(
    rows[0]!.n,
    2,
    "the two follows: hiding and unhiding (and a block with nothing to remove) wrote no relation event",
  );
});

test("api batch relationships: ?id=a&id=b (up to 40) in the order asked, unknown ids and accounts that block me left out, requestedBy included; 401 before 400", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave"]);
  await createAccounts(admin, ["locked"], { private: true });
  const alice = await h.as("alice");
  ok(await alice.put("/v1/accounts/me/following/bob"));
  ok(await alice.put("/v1/accounts/me/following/locked"));
  ok(await (await h.as("carol")).put("/v1/accounts/me/following/alice"));
  ok(await (await h.as("dave")).put("/v1/accounts/me/blocks/alice"));
  ok(await alice.put("/v1/accounts/alice", { private: true }));
  ok(await (await h.as("bob")).put("/v1/accounts/me/following/alice"));

  const res = ok(
    await alice.get<(Relationship & { id: string })[]>(
      "/v1/accounts/me/relationships?id=dave&id=ghost&id=bob&id=locked&id=carol&id=bob",
    ),
  );
  assert.deepEqual(res, [
    { id: "bob", ...NOTHING, following: true, requestedBy: true },
    { id: "locked", ...NOTHING, requested: true },
    { id: "carol", ...NOTHING, followedBy: true },
  ]);
  assert.deepEqual(
    ok(await alice.get("/v1/accounts/me/relationships?id=bob")),
    [{ id: "bob", ...NOTHING, following: true, requestedBy: true }],
    "a single id",
  );
  const forty = Array.from({ length: 40 }, (_, i) => `id=x${i}`).join("&");
  assert.deepEqual(ok(await alice.get(`/v1/accounts/me/relationships?${forty}`)), []);
  assertError(await alice.get(`/v1/accounts/me/relationships?${forty}&id=x40`), 400, "INVALID_INPUT", "41 ids");
  assertError(await alice.get("/v1/accounts/me/relationships"), 400, "INVALID_INPUT", "no id");
  assertError(await alice.get("/v1/accounts/me/relationships?id=bad%20id"), 400, "INVALID_INPUT", "an invalid id");
  assertError(
    await h.request("GET", "/v1/accounts/me/relationships?id=bad%20id"),
    401,
    "UNAUTHENTICATED",
    "no token: 401 before the 400",
  );
});

test("api follow, unfollow, block, unblock, approve and reject answer the resulting relationship next to the outcome", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  await createAccounts(admin, ["locked"], { private: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const locked = await h.as("locked");
  type WithRelationship = RelationOutcome & { relationship: Relationship };
  ok(await bob.put("/v1/accounts/me/following/alice"));
  assert.deepEqual(ok(await alice.put<WithRelationship>("/v1/accounts/me/following/bob")).relationship, {
    ...NOTHING,
    following: true,
    followedBy: true,
  });
  assert.deepEqual(
    ok(await alice.put<WithRelationship>("/v1/accounts/me/following/bob")).relationship,
    { ...NOTHING, following: true, followedBy: true },
    "a NOOP too",
  );
  assert.deepEqual(ok(await alice.delete<WithRelationship>("/v1/accounts/me/following/bob")).relationship, {
    ...NOTHING,
    followedBy: true,
  });
  assert.deepEqual(ok(await alice.put<WithRelationship>("/v1/accounts/me/following/locked")).relationship, {
    ...NOTHING,
    requested: true,
  });
  assert.deepEqual(
    ok(await locked.post<WithRelationship>("/v1/accounts/me/follow-requests/alice/approve")).relationship,
    { ...NOTHING, followedBy: true },
  );
  ok(await bob.put("/v1/accounts/me/following/locked"));
  assert.deepEqual(
    ok(await locked.post<WithRelationship>("/v1/accounts/me/follow-requests/bob/reject")).relationship,
    NOTHING,
  );
  assert.deepEqual(
    ok(await alice.put<WithRelationship>("/v1/accounts/me/blocks/bob")).relationship,
    { ...NOTHING, blocking: true },
    "both directions removed",
  );
  assert.deepEqual(ok(await alice.delete<WithRelationship>("/v1/accounts/me/blocks/bob")).relationship, NOTHING);
});
