import { test } from "node:test";
import assert from "node:assert/strict";
import { WriteGuard } from "../support/write-guard.ts";
import { assertError, createAccounts, ok, startApi, type ApiHarness, type ApiResponse } from "./harness.ts";

interface IdJson {
  id: string;
}

/**
 * What a caller may not see answers exactly as what does not exist (status,
 * code, and the message with the id it names), and writes nothing.
 */
function assertSameAsUnknown(
  res: ApiResponse,
  id: string,
  unknown: ApiResponse,
  unknownId: string,
  label: string,
): void {
  assert.equal(res.status, unknown.status, `${label}: ${res.status} ${res.text}`);
  const body = res.body as { error: { code: string; message: string } };
  const expected = unknown.body as { error: { code: string; message: string } };
  assert.equal(body.error.code, expected.error.code, label);
  assert.equal(
    body.error.message.replace(id, "<id>"),
    expected.error.message.replace(unknownId, "<id>"),
    `${label}: the same message`,
  );
}

async function setup(h: ApiHarness) {
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carl", "dave"]);
  const [alice, bob, carl, dave] = [await h.as("alice"), await h.as("bob"), await h.as("carl"), await h.as("dave")];
  const guard = await WriteGuard.create(h.db.url, h.db.pool, { mustHave: ["comment", "comment_outbox", "item"] });
  const patch = (who: { token: string }, id: string, body: string) =>
    h.request("PATCH", `/v1/comments/${id}`, { token: who.token, json: { body } });
  return { alice, bob, carl, dave, guard, patch };
}

test("comments API: editing or deleting a comment of a deleted post answers as for an unknown comment and writes nothing", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const { alice, bob, guard, patch } = await setup(h);
  t.after(() => guard.close());
  const post = ok(await alice.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "soon gone" }), 201);
  const comment = ok(await bob.post<IdJson>(`/v1/posts/${post.id}/comments`, { body: "mine" }), 201);
  // Control: while the post lives, the author edits.
  ok(await patch(bob, comment.id, "edited while the post lives"));
  ok(await alice.delete(`/v1/posts/${post.id}`));

  const before = await guard.snapshot();
  const unknownEdit = await patch(bob, "no-such-comment", "x");
  assertError(unknownEdit, 404, "COMMENT_NOT_FOUND");
  assertSameAsUnknown(
    await patch(bob, comment.id, "edited after the post was deleted"),
    comment.id,
    unknownEdit,
    "no-such-comment",
    "edit, comment's author",
  );
  const unknownDelete = await bob.delete("/v1/comments/no-such-comment");
  assertSameAsUnknown(
    await bob.delete(`/v1/comments/${comment.id}`),
    comment.id,
    unknownDelete,
    "no-such-comment",
    "delete, comment's author",
  );
  assertSameAsUnknown(
    await alice.delete(`/v1/comments/${comment.id}`),
    comment.id,
    unknownDelete,
    "no-such-comment",
    "delete, post's author",
  );
  assertSameAsUnknown(
    await bob.get(`/v1/comments/${comment.id}/replies`),
    comment.id,
    await bob.get("/v1/comments/no-such-comment/replies"),
    "no-such-comment",
    "replies",
  );
  assert.deepEqual(await guard.snapshot(), before, "nothing written");
});

test("comments API: a reply whose parentId is a comment the caller may not see answers as an unknown parentId; only a visible one is 'on another post'", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const { alice, bob, carl, dave, guard } = await setup(h);
  t.after(() => guard.close());
  ok(await carl.put("/v1/accounts/me/following/alice"));
  const target = ok(await dave.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "bob replies here" }), 201);
  const followersOnly = ok(await alice.post<IdJson>("/v1/posts", { visibility: "FOLLOWERS", body: "followers" }), 201);
  const publicPost = ok(await alice.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "public" }), 201);
  const doomedPost = ok(await alice.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "soon gone" }), 201);
  const onFollowersOnly = ok(
    await carl.post<IdJson>(`/v1/posts/${followersOnly.id}/comments`, { body: "for followers" }),
    201,
  );
  const byBlocker = ok(
    await carl.post<IdJson>(`/v1/posts/${publicPost.id}/comments`, { body: "carl will block bob" }),
    201,
  );
  const visible = ok(
    await alice.post<IdJson>(`/v1/posts/${publicPost.id}/comments`, { body: "anyone sees this" }),
    201,
  );
  const onDeleted = ok(
    await alice.post<IdJson>(`/v1/posts/${doomedPost.id}/comments`, { body: "gone with its post" }),
    201,
  );
  const deleted = ok(await alice.post<IdJson>(`/v1/posts/${publicPost.id}/comments`, { body: "deleted" }), 201);
  ok(await carl.put("/v1/accounts/me/blocks/bob"));
  ok(await alice.delete(`/v1/posts/${doomedPost.id}`));
  ok(await alice.delete(`/v1/comments/${deleted.id}`));

  const reply = (parentId: string) => bob.post(`/v1/posts/${target.id}/comments`, { body: "a reply", parentId });
  const before = await guard.snapshot();
  const unknown = await reply("no-such-comment");
  assertError(unknown, 404, "COMMENT_NOT_FOUND");
  for (const [label, parent] of [
    ["a comment on a followers-only post bob does not follow", onFollowersOnly],
    ["a comment by someone who blocks bob", byBlocker],
    ["a comment of a deleted post", onDeleted],
    ["a deleted comment on another post", deleted],
  ] as const) {
    assertSameAsUnknown(await reply(parent.id), parent.id, unknown, "no-such-comment", label);
  }
  // Control: a comment bob may see is named for what it is.
  const elsewhere = await reply(visible.id);
  assertError(elsewhere, 400, "INVALID_INPUT");
  assert.match((elsewhere.body as { error: { message: string } }).error.message, /is a comment on another post/);
  assert.deepEqual(await guard.snapshot(), before, "nothing written");
});
