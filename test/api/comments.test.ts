import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type ApiResponse, type PostJson } from "./harness.ts";

interface CommentJson {
  id: string;
  postId: string;
  parentId: string | null;
  depth: number;
  author: string | null;
  body: string | null;
  deleted: boolean;
  editCount: number;
  replyCount: number;
}
interface CommentPage {
  comments: CommentJson[];
  nextCursor?: string;
}
interface CommentCount {
  count: number;
  lag: number;
  pendingForPost: number;
  stale: boolean;
}

async function setup(t: import("node:test").TestContext) {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave"]);
  const [alice, bob, carol, dave] = await Promise.all(["alice", "bob", "carol", "dave"].map((id) => h.as(id)));
  const patch = async <T = unknown>(who: { token: string }, path: string, json: unknown) =>
    h.request<T>("PATCH", path, { token: who.token, json });
  return { h, alice: alice!, bob: bob!, carol: carol!, dave: dave!, patch };
}

async function tableCounts(h: Awaited<ReturnType<typeof startApi>>): Promise<string> {
  const { rows } = await h.db.pool.query<{ s: string }>(
    `SELECT (SELECT count(*) FROM comment) || '/' || (SELECT count(*) FROM comment_outbox) || '/' || (SELECT count(*) FROM item) || '/' ||
            (SELECT string_agg(last::text, ',' ORDER BY part) FROM comment_seq) || '/' ||
            (SELECT coalesce(sum(edit_count), 0) FROM comment) || '/' || (SELECT count(*) FROM comment WHERE deleted_at IS NOT NULL) AS s`,
  );
  return rows[0]!.s;
}

test("comments API: thread, reply counts, keyset pages, edit counter, tombstones and the exact count", async (t) => {
  const { h, alice, bob, carol, patch } = await setup(t);
  const post = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const created: CommentJson[] = [];
  for (let i = 0; i < 5; i++)
    created.push(ok<CommentJson>(await bob.post(`/v1/posts/${post.id}/comments`, { body: `c${i}` }), 201));
  const reply = ok<CommentJson>(
    await carol.post(`/v1/posts/${post.id}/comments`, { body: "re", parentId: created[0]!.id }),
    201,
  );
  assert.deepEqual([reply.parentId, reply.depth], [created[0]!.id, 1]);

  const pages: CommentJson[] = [];
  let cursor: string | undefined;
  do {
    const page = ok<CommentPage>(
      await carol.get(`/v1/posts/${post.id}/comments?order=oldest&limit=2${cursor ? `&cursor=${cursor}` : ""}`),
    );
    pages.push(...page.comments);
    cursor = page.nextCursor;
    // A comment arriving while paging (newest order would show it first) never repeats or skips older rows.
    if (pages.length === 2) ok(await bob.post(`/v1/posts/${post.id}/comments`, { body: "late" }), 201);
  } while (cursor);
  assert.deepEqual(
    pages.slice(0, 5).map((c) => c.body),
    ["c0", "c1", "c2", "c3", "c4"],
  );
  assert.equal(pages[0]!.replyCount, 1);
  const newest = ok<CommentPage>(await carol.get(`/v1/posts/${post.id}/comments?limit=1`));
  assert.equal(newest.comments[0]!.body, "late");

  const edited = ok<CommentJson>(
    await patch<CommentJson>(bob, `/v1/comments/${created[1]!.id}`, { body: "c1 (edited)" }),
  );
  assert.deepEqual([edited.body, edited.editCount], ["c1 (edited)", 1]);
  assertError(await patch(carol, `/v1/comments/${created[1]!.id}`, { body: "not mine" }), 403, "NOT_COMMENT_AUTHOR");

  // Carol may not delete bob's comment; alice (the post's author) may. A comment with replies stays as a placeholder.
  assertError(await carol.delete(`/v1/comments/${created[2]!.id}`), 403, "NOT_COMMENT_AUTHOR");
  ok(await alice.delete(`/v1/comments/${created[2]!.id}`));
  const del0 = ok<{ outcome: string; comment: CommentJson }>(await bob.delete(`/v1/comments/${created[0]!.id}`));
  assert.equal(del0.outcome, "CHANGED");
  assert.equal(ok<{ outcome: string }>(await bob.delete(`/v1/comments/${created[0]!.id}`)).outcome, "NOOP");
  assertError(await patch(bob, `/v1/comments/${created[0]!.id}`, { body: "again" }), 409, "COMMENT_DELETED");
  const all = ok<CommentPage>(await carol.get(`/v1/posts/${post.id}/comments?order=oldest`)).comments;
  assert.deepEqual(
    all.map((c) => c.body),
    [null, "c1 (edited)", "c3", "c4", "late"],
    "c2 gone, c0 a placeholder",
  );
  assert.deepEqual([all[0]!.author, all[0]!.deleted, all[0]!.replyCount], [null, true, 1]);
  const replies = ok<CommentPage>(await alice.get(`/v1/comments/${created[0]!.id}/replies`)).comments;
  assert.deepEqual(
    replies.map((c) => [c.body, c.author]),
    [["re", "carol"]],
  );

  // A comment is a likeable item through the likes ledger as it is.
  ok(await alice.put(`/v1/items/${reply.id}/likes/me`));
  const before = ok<CommentCount>(await alice.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`));
  assert.ok(Math.abs(before.count - 5) <= before.pendingForPost, JSON.stringify(before));
  await h.drain();
  assert.deepEqual(ok<CommentCount>(await alice.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`)), {
    count: 5,
    lag: 0,
    pendingForPost: 0,
    stale: false,
    source: "database",
  });
  assert.equal((await h.ledger.likes.hasLiked("alice", reply.id)).liked, true);
});

test("comments API: a retried create with the same idempotency key makes one comment; another comment under that key is a 409", async (t) => {
  const { h, alice, bob } = await setup(t);
  const post = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const send = () => bob.post<CommentJson>(`/v1/posts/${post.id}/comments`, { body: "once", idempotencyKey: "k-1" });
  const results = await Promise.all([send(), send(), send()]);
  const ids = new Set(results.map((r) => ok<CommentJson>(r, 201).id));
  assert.equal(ids.size, 1);
  assertError(
    await bob.post(`/v1/posts/${post.id}/comments`, { body: "other", idempotencyKey: "k-1" }),
    409,
    "IDEMPOTENCY_KEY_REUSED",
  );
  ok(
    await alice.post(`/v1/posts/${post.id}/comments`, { body: "once", idempotencyKey: "k-1" }),
    201,
    "keys are per author",
  );
  await h.drain();
  assert.equal(ok<CommentCount>(await bob.get(`/v1/posts/${post.id}/comment-count`)).count, 2);
});

test("comments API: a reader who may not see the post gets the post's 404 on every route; blocked commenters are hidden", async (t) => {
  const { h, alice, bob, carol, dave, patch } = await setup(t);
  const followers = ok<PostJson>(await alice.post("/v1/posts", { visibility: "FOLLOWERS", body: "friends" }), 201);
  ok(await bob.put("/v1/accounts/me/following/alice"));
  await h.drain();
  const c = ok<CommentJson>(await bob.post(`/v1/posts/${followers.id}/comments`, { body: "hi" }), 201);
  // Carol does not follow: the same 404 as a missing post on every route.
  for (const res of [
    await carol.post(`/v1/posts/${followers.id}/comments`, { body: "x" }),
    await carol.get(`/v1/posts/${followers.id}/comments`),
    await carol.get(`/v1/posts/${followers.id}/comment-count`),
    await carol.get("/v1/posts/no-such-post/comments"),
  ])
    assertError(res, 404, "POST_NOT_FOUND");
  for (const res of [
    await carol.get(`/v1/comments/${c.id}/replies`),
    await carol.delete(`/v1/comments/${c.id}`),
    await patch(carol, `/v1/comments/${c.id}`, { body: "x" }),
  ])
    assertError(res, 404, "COMMENT_NOT_FOUND");

  // Alice blocks bob: he can neither read nor comment; his comment is hidden from nobody else but...
  const pub = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "all" }), 201);
  const byDave = ok<CommentJson>(await dave.post(`/v1/posts/${pub.id}/comments`, { body: "dave here" }), 201);
  ok(await bob.post(`/v1/posts/${pub.id}/comments`, { body: "bob here" }), 201);
  ok(await dave.put("/v1/accounts/me/blocks/carol"));
  // ... a comment by an account that blocked the reader (or that the reader blocked) is hidden from that reader.
  const seenByCarol = ok<CommentPage>(await carol.get(`/v1/posts/${pub.id}/comments`)).comments.map((x) => x.author);
  assert.deepEqual(seenByCarol, ["bob"]);
  assertError(
    await carol.post(`/v1/posts/${pub.id}/comments`, { body: "re", parentId: byDave.id }),
    404,
    "COMMENT_NOT_FOUND",
  );
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  assertError(await bob.get(`/v1/posts/${pub.id}/comments`), 404, "POST_NOT_FOUND");
  assertError(await bob.post(`/v1/posts/${pub.id}/comments`, { body: "x" }), 404, "POST_NOT_FOUND");
  assertError(await bob.get(`/v1/posts/${followers.id}/comments?consistency=truth`), 404, "POST_NOT_FOUND");
  // The count includes hidden comments (it is the post's, not the reader's): docs/comments.md.
  await h.drain();
  assert.equal(ok<CommentCount>(await carol.get(`/v1/posts/${pub.id}/comment-count`)).count, 2);
});

test("comments API: bad input gets a typed error and writes nothing", async (t) => {
  const { h, alice, bob, patch } = await setup(t);
  const post = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const other = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "other" }), 201);
  const onOther = ok<CommentJson>(await bob.post(`/v1/posts/${other.id}/comments`, { body: "elsewhere" }), 201);
  let parent = ok<CommentJson>(await bob.post(`/v1/posts/${post.id}/comments`, { body: "d0" }), 201);
  for (let d = 1; d <= 7; d++)
    parent = ok<CommentJson>(
      await bob.post(`/v1/posts/${post.id}/comments`, { body: `d${d}`, parentId: parent.id }),
      201,
    );
  assert.equal(parent.depth, 7);
  const before = await tableCounts(h);
  const cases: [string, Promise<ApiResponse>, number, string][] = [
    ["empty body", bob.post(`/v1/posts/${post.id}/comments`, { body: "" }), 400, "INVALID_INPUT"],
    ["blank body", bob.post(`/v1/posts/${post.id}/comments`, { body: "   " }), 400, "INVALID_INPUT"],
    ["oversized body", bob.post(`/v1/posts/${post.id}/comments`, { body: "x".repeat(10_001) }), 400, "INVALID_INPUT"],
    ["NUL", bob.post(`/v1/posts/${post.id}/comments`, { body: "a\u0000b" }), 400, "INVALID_INPUT"],
    ["no body", bob.post(`/v1/posts/${post.id}/comments`, {}), 400, "INVALID_INPUT"],
    ["unknown field", bob.post(`/v1/posts/${post.id}/comments`, { body: "x", extra: 1 }), 400, "INVALID_INPUT"],
    [
      "parent on another post",
      bob.post(`/v1/posts/${post.id}/comments`, { body: "x", parentId: onOther.id }),
      400,
      "INVALID_INPUT",
    ],
    [
      "depth over the limit",
      bob.post(`/v1/posts/${post.id}/comments`, { body: "x", parentId: parent.id }),
      400,
      "INVALID_INPUT",
    ],
    [
      "missing parent",
      bob.post(`/v1/posts/${post.id}/comments`, { body: "x", parentId: "no-such" }),
      404,
      "COMMENT_NOT_FOUND",
    ],
    ["bad parent id", bob.post(`/v1/posts/${post.id}/comments`, { body: "x", parentId: "a b" }), 400, "INVALID_INPUT"],
    ["empty edit", patch(bob, `/v1/comments/${parent.id}`, { body: "" }), 400, "INVALID_INPUT"],
    ["NUL edit", patch(bob, `/v1/comments/${parent.id}`, { body: "\u0000" }), 400, "INVALID_INPUT"],
    ["bad order", bob.get(`/v1/posts/${post.id}/comments?order=random`), 400, "INVALID_INPUT"],
    ["bad cursor", bob.get(`/v1/posts/${post.id}/comments?cursor=zzz`), 400, "INVALID_INPUT"],
    ["bad lag", bob.get(`/v1/posts/${post.id}/comment-count?allowedLag=-1`), 400, "INVALID_INPUT"],
  ];
  for (const [label, res, status, code] of cases) assertError(await res, status, code, label);
  assert.equal(await tableCounts(h), before, "nothing was written");
});

test("comments API: replying to a deleted comment is 409 COMMENT_DELETED and writes nothing; editing it too", async (t) => {
  const { h, alice, bob, patch } = await setup(t);
  const post = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const comment = ok<CommentJson>(await bob.post(`/v1/posts/${post.id}/comments`, { body: "soon gone" }), 201);
  ok(await bob.delete(`/v1/comments/${comment.id}`));
  const before = await tableCounts(h);
  assertError(
    await alice.post(`/v1/posts/${post.id}/comments`, { body: "a reply", parentId: comment.id }),
    409,
    "COMMENT_DELETED",
  );
  assertError(await patch(bob, `/v1/comments/${comment.id}`, { body: "edited" }), 409, "COMMENT_DELETED");
  assert.equal(await tableCounts(h), before, "nothing written (comments, outbox, items, sequences, edits, tombstones)");
});
