import { test } from "node:test";
import assert from "node:assert/strict";
import { WriteGuard } from "../support/write-guard.ts";
import {
  createAccounts,
  ok,
  startApi,
  type ApiHarness,
  type ApiResponse,
  type Client,
  type LikeOutcome,
} from "./harness.ts";

interface IdJson {
  id: string;
}

interface LikerPage {
  likers: { userId: string }[];
}

/**
 * A comment, as a likeable item, is exactly as visible as the comment itself
 * (the SQL function item_state). Every hidden case must answer what a missing item answers, on
 * every like route, and write nothing.
 */
async function setup(h: ApiHarness) {
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "carl", "fran", "bob", "dave", "erin", "gina"]);
  const [alice, carl, fran, bob, dave, erin, gina] = [
    await h.as("alice"),
    await h.as("carl"),
    await h.as("fran"),
    await h.as("bob"),
    await h.as("dave"),
    await h.as("erin"),
    await h.as("gina"),
  ];
  ok(await carl.put("/v1/accounts/me/following/alice"));
  ok(await fran.put("/v1/accounts/me/following/alice"));
  const followersPost = ok(
    await alice.post<IdJson>("/v1/posts", { visibility: "FOLLOWERS", body: "for followers" }),
    201,
  );
  const publicPost = ok(await alice.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "for everyone" }), 201);
  const onFollowers = ok(
    await carl.post<IdJson>(`/v1/posts/${followersPost.id}/comments`, { body: "a comment on a followers-only post" }),
    201,
  );
  const onPublic = ok(
    await carl.post<IdJson>(`/v1/posts/${publicPost.id}/comments`, { body: "a comment on a public post" }),
    201,
  );
  return { admin, alice, carl, fran, bob, dave, erin, gina, followersPost, publicPost, onFollowers, onPublic };
}

/** What each like route answers for an item that does not exist, as `who` (null: no token). */
async function missingAnswers(h: ApiHarness, who: Client | null): Promise<Record<string, ApiResponse>> {
  return likeRouteAnswers(h, who, "no-such-item");
}

async function likeRouteAnswers(
  h: ApiHarness,
  who: Client | null,
  itemId: string,
): Promise<Record<string, ApiResponse>> {
  const token = who?.token ?? null;
  const answers: Record<string, ApiResponse> = {
    "GET likes": await h.request("GET", `/v1/items/${itemId}/likes`, { token }),
    "GET like-count": await h.request("GET", `/v1/items/${itemId}/like-count`, { token }),
  };
  if (who) {
    answers["GET likes/me"] = await h.request("GET", `/v1/items/${itemId}/likes/me`, { token });
    answers["PUT likes/me"] = await h.request("PUT", `/v1/items/${itemId}/likes/me`, { token });
    answers["DELETE likes/me"] = await h.request("DELETE", `/v1/items/${itemId}/likes/me`, { token });
  }
  return answers;
}

/** Every like route answers `itemId` to `who` exactly as it answers a missing item (status and body), and nothing is written. */
async function assertLooksMissing(
  h: ApiHarness,
  guard: WriteGuard,
  who: Client | null,
  itemId: string,
  label: string,
): Promise<void> {
  const before = await guard.snapshot();
  const answers = await likeRouteAnswers(h, who, itemId);
  const missing = await missingAnswers(h, who);
  for (const [route, res] of Object.entries(answers)) {
    assert.equal(res.status, 404, `${label}: ${route} ${res.status} ${res.text}`);
    assert.deepEqual(res.body, missing[route]!.body, `${label}: ${route} answers as for a missing item`);
    assert.equal((res.body as { error: { code: string } }).error.code, "ITEM_NOT_FOUND", `${label}: ${route}`);
  }
  assert.deepEqual(await guard.snapshot(), before, `${label}: nothing written`);
}

async function openGuard(h: ApiHarness): Promise<WriteGuard> {
  return WriteGuard.create(h.db.url, h.db.pool, { mustHave: ["item", "like_fact", "like_outbox", "comment"] });
}

test("api item visibility: a comment on a FOLLOWERS post is hidden from a non-follower and from anonymous callers, on every like route; a follower may like it", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const guard = await openGuard(h);
  t.after(() => guard.close());
  const { fran, bob, onFollowers, onPublic } = await setup(h);

  await assertLooksMissing(h, guard, bob, onFollowers.id, "non-follower");
  await assertLooksMissing(h, guard, null, onFollowers.id, "anonymous");

  // Positive controls: a follower likes it and sees it; anyone reads a PUBLIC post's comment's likes.
  assert.equal(ok(await fran.put<LikeOutcome>(`/v1/items/${onFollowers.id}/likes/me`)).outcome, "CHANGED");
  assert.deepEqual(ok(await fran.get(`/v1/items/${onFollowers.id}/likes/me`)), { liked: true, version: 1 });
  assert.deepEqual(
    ok(await fran.get<LikerPage>(`/v1/items/${onFollowers.id}/likes`)).likers.map((l) => l.userId),
    ["fran"],
  );
  assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${onPublic.id}/likes/me`)).outcome, "CHANGED");
  assert.deepEqual(
    ok(await h.request<LikerPage>("GET", `/v1/items/${onPublic.id}/likes`)).likers.map((l) => l.userId),
    ["bob"],
  );
  assert.equal(
    ok(await h.request<{ count: number }>("GET", `/v1/items/${onPublic.id}/like-count`)).count,
    0,
    "the count, not yet drained",
  );

  // Still hidden after someone else's like: the like count and likers stay hidden from bob.
  await assertLooksMissing(h, guard, bob, onFollowers.id, "non-follower, after a follower's like");
});

test("api item visibility: a comment is hidden from a user blocked by its author, by the post's author, or blocking either; the post itself stays visible where only the comment's author blocks", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const guard = await openGuard(h);
  t.after(() => guard.close());
  const { alice, carl, dave, erin, gina, bob, publicPost, onPublic } = await setup(h);
  ok(await carl.put("/v1/accounts/me/blocks/dave"));
  ok(await alice.put("/v1/accounts/me/blocks/erin"));
  ok(await gina.put("/v1/accounts/me/blocks/carl"));

  await assertLooksMissing(h, guard, dave, onPublic.id, "blocked by the comment's author");
  await assertLooksMissing(h, guard, erin, onPublic.id, "blocked by the post's author");
  await assertLooksMissing(h, guard, gina, onPublic.id, "blocking the comment's author");
  // The block hides carl's comment from dave, not alice's post.
  assert.equal(ok(await dave.put<LikeOutcome>(`/v1/items/${publicPost.id}/likes/me`)).outcome, "CHANGED");
  // Control: someone in no block sees and likes the comment.
  assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${onPublic.id}/likes/me`)).outcome, "CHANGED");
  assert.equal(typeof ok(await bob.get<{ count: number }>(`/v1/items/${onPublic.id}/like-count`)).count, "number");
});

test("api item visibility: a like given before a block can be taken back, then the comment answers as missing", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const guard = await openGuard(h);
  t.after(() => guard.close());
  const { carl, dave, onPublic } = await setup(h);
  assert.equal(ok(await dave.put<LikeOutcome>(`/v1/items/${onPublic.id}/likes/me`)).outcome, "CHANGED");
  ok(await carl.put("/v1/accounts/me/blocks/dave"));
  const before = await guard.snapshot();
  const missing = await missingAnswers(h, dave);
  const like = await dave.put(`/v1/items/${onPublic.id}/likes/me`);
  assert.equal(like.status, 404, like.text);
  assert.deepEqual(like.body, missing["PUT likes/me"]!.body);
  assert.deepEqual(await guard.snapshot(), before, "a refused like writes nothing");
  const unlike = ok(await dave.delete<LikeOutcome>(`/v1/items/${onPublic.id}/likes/me`));
  assert.deepEqual(
    { outcome: unlike.outcome, liked: unlike.liked, version: unlike.version },
    { outcome: "CHANGED", liked: false, version: 2 },
  );
  await assertLooksMissing(h, guard, dave, onPublic.id, "after retracting: nothing left to retract");
});

test("api item visibility: a comment of a deleted post, and a deleted comment, answer as missing to everyone, also to who liked them", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const guard = await openGuard(h);
  t.after(() => guard.close());
  const { alice, carl, fran, bob, followersPost, publicPost, onFollowers, onPublic } = await setup(h);
  const second = ok(await carl.post<IdJson>(`/v1/posts/${publicPost.id}/comments`, { body: "to be deleted" }), 201);
  assert.equal(ok(await fran.put<LikeOutcome>(`/v1/items/${onFollowers.id}/likes/me`)).outcome, "CHANGED");
  assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${second.id}/likes/me`)).outcome, "CHANGED");
  assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${onPublic.id}/likes/me`)).outcome, "CHANGED");

  ok(await alice.delete(`/v1/posts/${followersPost.id}`));
  for (const who of [fran, carl, alice, null])
    await assertLooksMissing(h, guard, who, onFollowers.id, `post deleted, as ${who?.id ?? "anonymous"}`);

  ok(await carl.delete(`/v1/comments/${second.id}`));
  for (const who of [bob, carl, alice, null])
    await assertLooksMissing(h, guard, who, second.id, `comment deleted, as ${who?.id ?? "anonymous"}`);

  // The likers' own lists leave them out; the live comment stays.
  assert.deepEqual(ok(await fran.get<{ likes: { itemId: string }[] }>("/v1/accounts/me/likes")).likes, []);
  assert.deepEqual(
    ok(await bob.get<{ likes: { itemId: string }[] }>("/v1/accounts/me/likes")).likes.map((l) => l.itemId),
    [onPublic.id],
  );
});

test("api item visibility: every item kind the schema allows has a rule in item_state, and a kind without one is visible to nobody", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const { rows } = await h.db.pool.query<{ def: string }>(
    "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'item_kind' AND conrelid = 'item'::regclass",
  );
  const kinds = [...rows[0]!.def.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]!).sort();
  assert.deepEqual(kinds, ["comment", "plain", "post"], "the kinds the item table accepts");
  const { rows: source } = await h.db.pool.query<{ src: string }>(
    "SELECT prosrc AS src FROM pg_proc WHERE proname = 'item_state'",
  );
  for (const kind of kinds)
    assert.match(source[0]!.src, new RegExp(`WHEN '${kind}' THEN`), `item_state has a branch for ${kind}`);
  // An item row that names no kind cannot be stored.
  await assert.rejects(
    h.db.pool.query("INSERT INTO item (item_id) VALUES ('kindless')"),
    /null value in column "kind"/,
  );
  // A kind added to the schema without a rule in item_state is MISSING for everyone (fails closed).
  await h.db.pool.query("ALTER TABLE item DROP CONSTRAINT item_kind");
  await h.db.pool.query("INSERT INTO item (item_id, kind) VALUES ('fourth-1', 'fourth')");
  const { rows: state } = await h.db.pool.query<{ s: string }>("SELECT item_state('alice', 'fourth-1', 'TRUTH') AS s");
  assert.equal(state[0]!.s, "MISSING");
});
