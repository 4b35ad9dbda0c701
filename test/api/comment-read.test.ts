import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type PostJson } from "./harness.ts";

interface CommentJson {
  id: string;
  postId: string;
  parentId: string | null;
  author: string | null;
  body: string | null;
  deleted: boolean;
  replyCount: number;
}
interface GroupJson {
  type: string;
  itemId?: string;
  postId?: string;
  sampleAccountIds: string[];
}

test("GET /v1/comments/{id}: the comment as listed under its post; 404 COMMENT_NOT_FOUND when the caller may not read it or its post (each beside its control); bad id 400", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave"]);
  const [alice, bob, carol, dave] = await Promise.all(["alice", "bob", "carol", "dave"].map((id) => h.as(id)));
  const pub = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const top = ok<CommentJson>(await bob!.post(`/v1/posts/${pub.id}/comments`, { body: "top" }), 201);
  const reply = ok<CommentJson>(
    await carol!.post(`/v1/posts/${pub.id}/comments`, { body: "re", parentId: top.id }),
    201,
  );

  const listed = ok<{ comments: CommentJson[] }>(await dave!.get(`/v1/posts/${pub.id}/comments`)).comments.find(
    (c) => c.id === top.id,
  );
  const read = ok<CommentJson>(await dave!.get(`/v1/comments/${top.id}`));
  assert.deepEqual(read, listed, "the same JSON as in the post's list, reply count included");
  assert.equal(read.replyCount, 1);
  assert.equal(
    ok<CommentJson>(await h.request("GET", `/v1/comments/${reply.id}`)).parentId,
    top.id,
    "no token: PUBLIC",
  );

  // A FOLLOWERS post: a non-follower gets 404 (not 403); a follower (control) reads it.
  const followers = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "FOLLOWERS", body: "inner" }), 201);
  ok(await carol!.put("/v1/accounts/me/following/alice"));
  const inner = ok<CommentJson>(await carol!.post(`/v1/posts/${followers.id}/comments`, { body: "in" }), 201);
  assertError(await dave!.get(`/v1/comments/${inner.id}`), 404, "COMMENT_NOT_FOUND", "non-follower");
  assertError(await h.request("GET", `/v1/comments/${inner.id}`), 404, "COMMENT_NOT_FOUND", "no token");
  assert.equal(ok<CommentJson>(await carol!.get(`/v1/comments/${inner.id}?consistency=truth`)).body, "in");
  ok(await dave!.put("/v1/accounts/me/following/alice"));
  assert.equal(
    ok<CommentJson>(await dave!.get(`/v1/comments/${inner.id}?consistency=truth`)).id,
    inner.id,
    "now a follower",
  );

  // A block with the comment's author hides the comment, as in the list; the control reads it.
  ok(await dave!.put("/v1/accounts/me/blocks/bob"));
  assertError(await dave!.get(`/v1/comments/${top.id}`), 404, "COMMENT_NOT_FOUND", "blocked author");
  assert.equal(ok<CommentJson>(await carol!.get(`/v1/comments/${top.id}`)).author, "bob");

  // A tombstone is read while a live reply is below it, as listed; not once the reply is gone.
  ok(await bob!.delete(`/v1/comments/${top.id}`));
  const tomb = ok<CommentJson>(await carol!.get(`/v1/comments/${top.id}`));
  assert.deepEqual([tomb.deleted, tomb.author, tomb.body], [true, null, null]);
  ok(await carol!.delete(`/v1/comments/${reply.id}`));
  assertError(await carol!.get(`/v1/comments/${top.id}`), 404, "COMMENT_NOT_FOUND", "a tombstone with nothing below");

  // A deleted post takes its comments.
  ok(await alice!.delete(`/v1/posts/${followers.id}`));
  assertError(await carol!.get(`/v1/comments/${inner.id}`), 404, "COMMENT_NOT_FOUND", "deleted post");

  assertError(await carol!.get("/v1/comments/no-such-comment"), 404, "COMMENT_NOT_FOUND");
  assertError(await carol!.get("/v1/comments/bad%20id"), 400, "INVALID_INPUT");
  assertError(await carol!.get(`/v1/comments/${inner.id}?consistency=projection_only`), 400, "INVALID_INPUT");
});

test("notifications over HTTP: a reply and a mention each notify, carrying their postId; a mentioned account blocked by the writer gets none (control: the one not blocked)", async (t) => {
  const h = await startApi({ partitions: 2 });
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave"]);
  const [alice, bob, carol, dave] = await Promise.all(["alice", "bob", "carol", "dave"].map((id) => h.as(id)));
  ok(await carol!.put("/v1/accounts/me/blocks/dave"));
  const post = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "PUBLIC", body: "hi @bob" }), 201);
  const top = ok<CommentJson>(await bob!.post(`/v1/posts/${post.id}/comments`, { body: "top" }), 201);
  const reply = ok<CommentJson>(
    await carol!.post(`/v1/posts/${post.id}/comments`, { body: "re @dave @alice", parentId: top.id }),
    201,
  );
  const other = ok<CommentJson>(await dave!.post(`/v1/posts/${post.id}/comments`, { body: "@bob hey" }), 201);
  await h.drain();
  const groups = async (who: typeof bob) =>
    ok<{ groups: GroupJson[] }>(await who!.get("/v1/notifications")).groups.map(
      (g) => `${g.type} ${g.sampleAccountIds.join(",")} ${g.itemId} ${g.postId}`,
    );
  assert.deepEqual((await groups(bob)).sort(), [
    `mention alice ${post.id} ${post.id}`,
    `mention dave ${other.id} ${post.id}`,
    `reply carol ${reply.id} ${post.id}`,
  ]);
  assert.deepEqual(await groups(dave), [], "carol blocks dave: no mention");
  assert.deepEqual(
    (await groups(alice)).sort(),
    [`comment bob ${top.id} ${post.id}`, `comment carol ${reply.id} ${post.id}`, `comment dave ${other.id} ${post.id}`],
    "the post's author mentioned in a comment: one comment notification",
  );
});
