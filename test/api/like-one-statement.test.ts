import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { assertError, createAccounts, ok, startApi, type LikeOutcome } from "./harness.ts";

interface PostJson {
  id: string;
}

/**
 * Records the text of every statement this process's pg clients send while it is on (the API
 * runs in this process). The dashboard sampler may send statements of its own meanwhile, so
 * the checks look at the statements that touch likes, items and posts, not at a total.
 */
function recordStatements(): { readonly texts: string[]; stop(): void } {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  const recorder = { texts: [] as string[], stop: () => void (prototype.query = original) };
  prototype.query = function (this: unknown, ...args: unknown[]) {
    const first = args[0] as string | { text?: string };
    recorder.texts.push(typeof first === "string" ? first : (first.text ?? ""));
    return original.apply(this, args);
  };
  return recorder;
}

const LIKE_PATH = /like_set|FROM item|FROM post|like_fact|blocked|relation/;

async function statementsOf(call: () => Promise<unknown>): Promise<string[]> {
  const recorder = recordStatements();
  try {
    await call();
  } finally {
    recorder.stop();
  }
  return recorder.texts
    .filter((text) => LIKE_PATH.test(text))
    .map((text) => text.replace(/\s+/g, " ").trim().slice(0, 100));
}

test("api: a like or unlike of any item kind is one statement that decides visibility inside the write (like_set_batch, the write marked checked), and a block still hides a post", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  ok(await admin.put("/v1/items/item-1"));

  const like = await statementsOf(async () =>
    assert.equal(ok(await alice.put<LikeOutcome>("/v1/items/item-1/likes/me")).outcome, "CHANGED"),
  );
  const noop = await statementsOf(async () =>
    assert.equal(ok(await alice.put<LikeOutcome>("/v1/items/item-1/likes/me")).outcome, "NOOP"),
  );
  const unlike = await statementsOf(async () =>
    assert.equal(ok(await alice.delete<LikeOutcome>("/v1/items/item-1/likes/me")).outcome, "CHANGED"),
  );
  const unlikeNoop = await statementsOf(async () =>
    assert.equal(ok(await alice.delete<LikeOutcome>("/v1/items/item-1/likes/me")).outcome, "NOOP"),
  );
  const missing = await statementsOf(async () =>
    assertError(await alice.put("/v1/items/no-such-item/likes/me"), 404, "ITEM_NOT_FOUND"),
  );

  // A post and a comment: the same one statement; the reader's right to see them is decided inside it.
  const post = ok(await alice.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const comment = ok(await alice.post<PostJson>(`/v1/posts/${post.id}/comments`, { body: "first" }), 201);
  const onPost = await statementsOf(async () =>
    assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${post.id}/likes/me`)).outcome, "CHANGED"),
  );
  const onComment = await statementsOf(async () =>
    assert.equal(ok(await bob.put<LikeOutcome>(`/v1/items/${comment.id}/likes/me`)).outcome, "CHANGED"),
  );
  t.diagnostic(`note plain item like: ${JSON.stringify(like)}; post like: ${JSON.stringify(onPost)}`);
  for (const statements of [like, noop, unlike, unlikeNoop, missing, onPost, onComment]) {
    assert.equal(statements.length, 1, JSON.stringify(statements));
    assert.match(statements[0]!, /like_set_batch/);
  }

  // A block hides the post from carol: her like is a 404 in the same one statement, and writes nothing.
  const carol = await h.as("carol");
  ok(await alice.put("/v1/accounts/me/blocks/carol"));
  const before = (await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_outbox")).rows[0]!.n;
  const hidden = await statementsOf(async () =>
    assertError(await carol.put(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND"),
  );
  assert.deepEqual(hidden.length, 1, JSON.stringify(hidden));
  assert.equal((await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_outbox")).rows[0]!.n, before);
  assert.equal(
    (await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact WHERE user_id = 'carol'")).rows[0]!
      .n,
    0,
  );
});
