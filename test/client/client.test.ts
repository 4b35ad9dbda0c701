/**
 * The TypeScript client (clients/typescript) drives a running service: every call below goes
 * through the generated types, openapi-fetch and real HTTP to the API of test/api/harness.ts,
 * and answers outside 2xx arrive as the client's typed errors.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createLedgerClient,
  LedgerApiError,
  RateLimitedError,
  statusOfCode,
  type LedgerClient,
} from "../../clients/typescript/src/index.ts";
import { startApi, type ApiHarness } from "../api/harness.ts";

async function clientAs(h: ApiHarness, id: string, options: { admin?: boolean } = {}): Promise<LedgerClient> {
  return createLedgerClient({ baseUrl: h.baseUrl, token: await h.token(id, options) });
}

/** The rejection of `call`, asserted to be a LedgerApiError. */
async function rejection(call: Promise<unknown>): Promise<LedgerApiError> {
  const err = await call.then(
    () => assert.fail("expected an error answer"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof LedgerApiError, `a LedgerApiError, got ${String(err)}`);
  return err;
}

test("client: likes, follows, a private account's requests, posts, comments and notifications through the typed client", async (t) => {
  const h = await startApi({ writesPerMinute: 1000 });
  t.after(() => h.close());
  const admin = await clientAs(h, "admin", { admin: true });
  const alice = await clientAs(h, "alice");
  const bob = await clientAs(h, "bob");
  for (const [id, isPrivate] of [
    ["alice", false],
    ["bob", true],
  ] as const) {
    const { data } = await admin.PUT("/v1/accounts/{id}", { params: { path: { id } }, body: { private: isPrivate } });
    assert.equal(data?.id ?? id, id);
  }

  // Likes: the outcome vocabulary, the count with its error bound, the caller's state.
  await admin.PUT("/v1/items/{id}", { params: { path: { id: "item-1" } } });
  const liked = (await alice.PUT("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } })).data!;
  assert.deepEqual([liked.outcome, liked.liked], ["CHANGED", true]);
  const again = (await alice.PUT("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } })).data!;
  assert.equal(again.outcome, "NOOP");
  await h.drain();
  const count = (
    await alice.GET("/v1/items/{id}/like-count", { params: { path: { id: "item-1" }, query: { exact: true } } })
  ).data!;
  assert.equal(count.count, 1);
  assert.equal(count.pendingForItem, 0);
  const state = (await alice.GET("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } })).data!;
  assert.equal(state.liked, true);

  // A follow of a private account is a request; bob approves it; alice then follows.
  const asked = (await alice.PUT("/v1/accounts/me/following/{id}", { params: { path: { id: "bob" } } })).data!;
  assert.equal(asked.state, "PENDING");
  const requests = (await bob.GET("/v1/accounts/me/follow-requests")).data!;
  assert.deepEqual(
    requests.requests.map((r) => r.accountId),
    ["alice"],
  );
  const approved = (
    await bob.POST("/v1/accounts/me/follow-requests/{id}/approve", { params: { path: { id: "alice" } } })
  ).data!;
  assert.equal(approved.state, "ACTIVE");
  await h.drain();
  const followers = (await bob.GET("/v1/accounts/{id}/follower-count", { params: { path: { id: "bob" } } })).data!;
  assert.equal(followers.count, 1);

  // Posts and comments: bob's followers-only post is readable by alice now, and she comments on it.
  const post = (await bob.POST("/v1/posts", { body: { body: "for followers", visibility: "FOLLOWERS" } })).data!;
  const read = (await alice.GET("/v1/posts/{id}", { params: { path: { id: post.id } } })).data!;
  assert.equal(read.post.body, "for followers");
  const comment = (
    await alice.POST("/v1/posts/{id}/comments", { params: { path: { id: post.id } }, body: { body: "hello" } })
  ).data!;
  assert.equal(comment.postId, post.id);
  const thread = (await bob.GET("/v1/posts/{id}/comments", { params: { path: { id: post.id } } })).data!;
  assert.deepEqual(
    thread.comments.map((c) => c.id),
    [comment.id],
  );

  // Notifications: alice's like of bob's post reaches bob, who marks it read.
  await alice.PUT("/v1/items/{id}/likes/me", { params: { path: { id: post.id } } });
  await h.drain();
  const groups = (await bob.GET("/v1/notifications")).data!.groups;
  assert.ok(groups.length > 0, "bob has notifications");
  await bob.POST("/v1/notifications/read", { body: { upTo: groups[0]!.mostRecentNotificationId } });
  const unread = (await bob.GET("/v1/notifications/unread-count")).data!;
  assert.equal(unread.count, 0);

  // Errors are typed: a post carol may not read is the API's 404 POST_NOT_FOUND.
  const carol = await clientAs(h, "carol");
  const hidden = await rejection(carol.GET("/v1/posts/{id}", { params: { path: { id: post.id } } }));
  assert.equal(hidden.status, 404);
  assert.ok(hidden.is("POST_NOT_FOUND"), hidden.code);
  assert.equal(statusOfCode(hidden.code), 404);
  assert.match(hidden.requestId ?? "", /\S/, "the error carries the request id");
  const refused = await rejection(alice.PUT("/v1/accounts/me/following/{id}", { params: { path: { id: "alice" } } }));
  assert.equal(refused.code, "SELF_FOLLOW");
  assert.equal(refused.retryable, false);
});

test("client: pages() and items() follow a list's cursor to its end, each entry once", async (t) => {
  const h = await startApi({ writesPerMinute: 1000 });
  t.after(() => h.close());
  const admin = await clientAs(h, "admin", { admin: true });
  const followerIds = Array.from({ length: 23 }, (_, i) => `fan-${String(i).padStart(2, "0")}`);
  await admin.PUT("/v1/accounts/{id}", { params: { path: { id: "star" } }, body: { private: false } });
  for (const id of followerIds) {
    const fan = await clientAs(h, id);
    await fan.PUT("/v1/accounts/me/following/{id}", { params: { path: { id: "star" } } });
  }
  await h.drain();
  const star = await clientAs(h, "star");

  const sizes: number[] = [];
  for await (const page of star.pages("/v1/accounts/{id}/followers", {
    params: { path: { id: "star" }, query: { limit: 5 } },
  })) {
    sizes.push(page.followers.length);
  }
  assert.deepEqual(sizes, [5, 5, 5, 5, 3], "five pages of at most 5, the last without a cursor");

  const seen: string[] = [];
  for await (const follower of star.items("/v1/accounts/{id}/followers", (page) => page.followers, {
    params: { path: { id: "star" }, query: { limit: 7 } },
  })) {
    seen.push(follower.accountId);
  }
  assert.deepEqual([...seen].sort(), followerIds, "every follower once, across pages");
});

test("client: a 429 is a RateLimitedError carrying its Retry-After", async (t) => {
  const h = await startApi({ writesPerMinute: 2 });
  t.after(() => h.close());
  const admin = await clientAs(h, "admin", { admin: true });
  await admin.PUT("/v1/items/{id}", { params: { path: { id: "item-1" } } });
  const alice = await clientAs(h, "alice");
  await alice.PUT("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } });
  await alice.DELETE("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } });
  const limited = await rejection(alice.PUT("/v1/items/{id}/likes/me", { params: { path: { id: "item-1" } } }));
  assert.ok(limited instanceof RateLimitedError, limited.name);
  assert.equal(limited.status, 429);
  assert.equal(limited.code, "RATE_LIMITED");
  assert.ok((limited.retryAfterSeconds ?? 0) > 0, `Retry-After ${limited.retryAfterSeconds}`);
  assert.equal(limited.retryable, true);
});
