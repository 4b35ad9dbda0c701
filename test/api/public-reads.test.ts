import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type FollowerPage,
  type LikeCount,
  type LikerPage,
  type PostJson,
  type PostRead,
  type Profile,
} from "./harness.ts";

/** Public data without a token, reads rate-limited (per IP without a token), CORS. */

test("api public reads without a token: counts, likers and PUBLIC posts, profiles and lists of accounts that do not hide them; FOLLOWERS and SELF posts look missing; writes and 'me' need a token", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  ok(await admin.put("/v1/items/item-1"));
  ok(await bob.put("/v1/items/item-1/likes/me"));
  ok(await bob.put("/v1/accounts/me/following/alice"));
  const pub = ok(await alice.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "hello world" }), 201);
  const followers = ok(await alice.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "for bob" }), 201);
  const self = ok(await alice.post<PostJson>("/v1/posts", { visibility: "SELF", body: "notes" }), 201);
  ok(await bob.put(`/v1/items/${pub.id}/likes/me`));
  ok(await bob.put(`/v1/items/${followers.id}/likes/me`));
  await h.drain();
  const anonymous = <T = unknown>(path: string) => h.request<T>("GET", path);

  assert.deepEqual(ok(await anonymous("/v1/items/item-1/like-count")), {
    count: 1,
    lag: 0,
    pendingForItem: 0,
    stale: false,
    source: "database",
  });
  assert.deepEqual(
    ok(await anonymous<LikerPage>("/v1/items/item-1/likes")).likers.map((l) => l.userId),
    ["bob"],
  );
  assert.equal(ok(await anonymous<LikeCount>(`/v1/items/${pub.id}/like-count`)).count, 1);
  assert.deepEqual(
    ok(await anonymous<LikerPage>(`/v1/items/${pub.id}/likes`)).likers.map((l) => l.userId),
    ["bob"],
  );
  const read = ok(await h.request<PostRead>("GET", `/v1/posts/${pub.id}`));
  assert.deepEqual({ body: read.post.body, decidedBy: read.decidedBy }, { body: "hello world", decidedBy: "public" });
  assert.equal(ok(await h.request<LikeCount>("GET", "/v1/items/item-1/like-count")).count, 1);
  assert.deepEqual(ok(await h.request<Profile>("GET", "/v1/accounts/alice")), {
    id: "alice",
    private: false,
    hideCollections: false,
    counts: { followers: 1, following: 0, lag: 0, stale: false },
  });
  assert.deepEqual(
    ok(await h.request<FollowerPage>("GET", "/v1/accounts/alice/followers")).followers.map((f) => f.accountId),
    ["bob"],
  );
  ok(await anonymous("/v1/accounts/bob/following"));
  ok(await anonymous("/v1/accounts/alice/follower-count"));

  // Not public: a FOLLOWERS or SELF post, its likers and count, look like missing ones.
  const missingPost = await anonymous("/v1/posts/no-such-post");
  for (const id of [followers.id, self.id]) {
    const res = await anonymous(`/v1/posts/${id}`);
    assertError(res, 404, "POST_NOT_FOUND");
    assert.equal(res.text, missingPost.text);
    assertError(await anonymous(`/v1/items/${id}/likes`), 404, "ITEM_NOT_FOUND");
    assertError(await anonymous(`/v1/items/${id}/like-count`), 404, "ITEM_NOT_FOUND");
  }
  assert.equal(
    ok(await bob.get<LikerPage>(`/v1/items/${followers.id}/likes`)).likers.length,
    1,
    "a follower with a token sees them",
  );

  // Writes, my own data and 'me' need a token.
  for (const [method, path] of [
    ["PUT", "/v1/items/item-1/likes/me"],
    ["GET", "/v1/items/item-1/likes/me"],
    ["GET", "/v1/accounts/me"],
    ["GET", "/v1/accounts/me/followers"],
    ["GET", "/v1/accounts/me/likes"],
    ["POST", "/v1/posts"],
  ] as const) {
    assertError(await h.request(method, path), 401, "UNAUTHENTICATED", `${method} ${path}`);
  }
  // A token that is sent must be valid, even on a public route.
  assertError(
    await h.request("GET", "/v1/items/item-1/like-count", { headers: { authorization: "Bearer not-a-token" } }),
    401,
    "UNAUTHENTICATED",
  );
});

test("api reads are rate-limited with a budget of their own: per user, and per IP without a token; writes keep theirs", async (t) => {
  const h = await startApi({ readsPerMinute: 4, writesPerMinute: 100 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  for (let i = 0; i < 4; i++) {
    const res = await alice.get("/v1/items/item-1/like-count");
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-ratelimit-limit"), "4");
  }
  const limited = await alice.get("/v1/items/item-1/likes");
  assertError(limited, 429, "RATE_LIMITED", "alice's 5th read");
  assert.ok(Number(limited.headers.get("retry-after")) >= 1);
  assert.equal(
    ok(await alice.put<{ outcome: string }>("/v1/items/item-1/likes/me")).outcome,
    "CHANGED",
    "writes have their own budget",
  );
  ok(await bob.get("/v1/items/item-1/like-count"), 200, "another user has a budget of their own");

  // Without a token: one budget per IP (every request of this test comes from 127.0.0.1).
  for (let i = 0; i < 4; i++) ok(await h.request("GET", "/v1/items/item-1/like-count"), 200, `anonymous read ${i + 1}`);
  assertError(await h.request("GET", "/v1/accounts/alice"), 429, "RATE_LIMITED", "the 5th anonymous read from this IP");
  ok(await bob.get("/v1/items/item-1/like-count"), 200, "users with tokens are counted apart from the IP");
});

test("api CORS is configurable: allowed origins get Access-Control-Allow-Origin and a preflight answer without a token; other origins and an unconfigured service get none", async (t) => {
  const h = await startApi({ corsOrigins: ["https://app.example.com"] });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  const preflight = await h.request("OPTIONS", "/v1/items/item-1/likes/me", {
    headers: {
      origin: "https://app.example.com",
      "access-control-request-method": "PUT",
      "access-control-request-headers": "authorization",
    },
  });
  assert.equal(preflight.status, 204, preflight.text);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.match(preflight.headers.get("access-control-allow-methods") ?? "", /PUT/);
  assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /authorization/);
  const get = await h.request("GET", "/v1/items/item-1/like-count", { headers: { origin: "https://app.example.com" } });
  assert.equal(get.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.match(get.headers.get("access-control-expose-headers") ?? "", /link/);
  const other = await h.request("GET", "/v1/items/item-1/like-count", {
    headers: { origin: "https://evil.example.com" },
  });
  assert.equal(other.status, 200);
  assert.equal(other.headers.get("access-control-allow-origin"), null, "an origin not in the list");

  const closed = await startApi();
  t.after(() => closed.close());
  const plain = await closed.request("GET", "/healthz", { headers: { origin: "https://app.example.com" } });
  assert.equal(plain.headers.get("access-control-allow-origin"), null, "no CORS unless configured");
});
