import { test } from "node:test";
import assert from "node:assert/strict";
import { CommentService, type Comment } from "../../src/content/comments.ts";
import { acct, relationsFixture } from "../relations/fixture.ts";

const byBody = (comments: readonly Comment[]) => comments.map((c) => [c.body, c.deleted, c.replyCount]);

test("reply counts leave tombstones out: deleting a reply lowers its parent's count in every list and in the delete's answer", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  const comments = await CommentService.open(f.db.pool);
  const post = await f.posts.createPost(acct(1), "PUBLIC", "the post");
  const top = await comments.create(acct(2), post.postId, "top");
  const r1 = await comments.create(acct(3), post.postId, "r1", { parentId: top.id });
  const r2 = await comments.create(acct(4), post.postId, "r2", { parentId: top.id });
  const r3 = await comments.create(acct(5), post.postId, "r3", { parentId: top.id });
  await comments.create(acct(6), post.postId, "r3a", { parentId: r3.id });
  assert.deepEqual(byBody((await comments.listTopLevel(acct(7), post.postId)).comments), [["top", false, 3]]);

  // r2 has no replies: deleted, it is neither listed nor counted.
  const deleted = await comments.delete(acct(4), r2.id);
  assert.equal(deleted.outcome, "CHANGED");
  assert.deepEqual(byBody((await comments.listTopLevel(acct(7), post.postId)).comments), [["top", false, 2]]);
  assert.deepEqual(byBody((await comments.listReplies(acct(7), top.id)).comments), [
    ["r1", false, 0],
    ["r3", false, 1],
  ]);

  // r3 has a reply: deleted, it stays as a placeholder with its own reply count, and its parent stops counting it.
  const tombstone = await comments.delete(acct(1), r3.id);
  assert.deepEqual([tombstone.outcome, tombstone.comment.deleted, tombstone.comment.replyCount], ["CHANGED", true, 1]);
  assert.deepEqual(byBody((await comments.listTopLevel(acct(7), post.postId)).comments), [["top", false, 1]]);
  assert.deepEqual(byBody((await comments.listReplies(acct(7), top.id)).comments), [
    ["r1", false, 0],
    [null, true, 1],
  ]);
  assert.deepEqual(byBody((await comments.listReplies(acct(7), r3.id)).comments), [["r3a", false, 0]]);

  // The top comment's own answers (edit, delete) count the same way.
  assert.equal((await comments.edit(acct(2), top.id, "top, edited")).replyCount, 1);
  await comments.delete(acct(3), r1.id);
  const topDeleted = await comments.delete(acct(2), top.id);
  assert.deepEqual([topDeleted.comment.deleted, topDeleted.comment.replyCount], [true, 0]);
  assert.deepEqual(
    byBody((await comments.listTopLevel(acct(7), post.postId)).comments),
    [[null, true, 0]],
    "a tombstone with only tombstoned replies below it",
  );
});

test("comment lists in FRESH_TOKEN fall back to the truth whenever the projection lags the author's partition, even for comments older than the revocation", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  const comments = await CommentService.open(f.db.pool);
  const [author, reader, other] = [acct(1), acct(2), acct(3)];
  await f.rel.follow(reader, author);
  await f.rel.follow(other, author);
  await f.projector.drain();
  const post = await f.posts.createPost(author, "FOLLOWERS", "P1");
  await comments.create(other, post.postId, "before the unfollow");
  const shown = async (mode: "FRESH_TOKEN" | "CONTENT_TOKEN" | "TRUTH") =>
    (await comments.listTopLevel(reader, post.postId, { mode })).comments.map((c) => c.body);
  assert.deepEqual(
    await shown("FRESH_TOKEN"),
    ["before the unfollow"],
    "the projection is current: it says the reader follows",
  );

  // The reader unfollows; the projector has not applied it. The comment's token predates the
  // unfollow, so CONTENT_TOKEN trusts the projection (its declared window) and still shows it;
  // FRESH_TOKEN compares with the partition's position now, falls back to the truth and hides it.
  await f.rel.unfollow(reader, author);
  assert.deepEqual(
    await shown("CONTENT_TOKEN"),
    ["before the unfollow"],
    "CONTENT_TOKEN: the old comment lags, as documented",
  );
  assert.deepEqual(await shown("FRESH_TOKEN"), [], "FRESH_TOKEN: no window");
  assert.deepEqual(await shown("TRUTH"), []);
  assert.equal(
    (await f.posts.canRead(reader, post.postId, "FRESH_TOKEN")).allowed,
    false,
    "the post's own decision agrees",
  );

  // The projection lags again, this time behind a follow: FRESH_TOKEN answers from the truth, which says follows.
  await f.projector.drain();
  await f.rel.follow(reader, author);
  assert.deepEqual(
    await shown("CONTENT_TOKEN"),
    [],
    "the projection, trusted for the old comment, does not have the follow yet",
  );
  assert.deepEqual(await shown("FRESH_TOKEN"), ["before the unfollow"]);
  await f.projector.drain();
  assert.deepEqual(await shown("FRESH_TOKEN"), ["before the unfollow"], "caught up: the projection itself answers");
});
