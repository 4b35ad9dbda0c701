import { test } from "node:test";
import assert from "node:assert/strict";
import { CommentService } from "../../src/content/comments.ts";
import { PostNotFoundError } from "../../src/content/post-errors.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { acct, relationsFixture } from "../relations/fixture.ts";

/**
 * 30-beyond-1 for comments: the author blocks a follower while a comment is being created on
 * the author's FOLLOWERS post. The block holds the author partition's event_seq row (seq k+1
 * taken, not committed); the comment's token read FOR SHARE waits for it, so the comment's
 * acl_token is k+1. The projection is still at k, so CONTENT_TOKEN trusts it for the post
 * (created before the block) but falls back to the truth for the comment: never shown.
 */
async function revocationFixture(t: import("node:test").TestContext) {
  const f = await relationsFixture(1, 10);
  // Armed from the start; the first transaction to reach it is the block below.
  const blockParked = await SqlHook.arm(f.db.pool, "block.beforeCommit");
  t.after(async () => {
    await blockParked.release();
    await f.close();
  });
  const author = acct(1);
  const reader = acct(2);
  const other = acct(3);
  for (const follower of [reader, other]) await f.rel.follow(follower, author);
  await f.projector.drain();
  const post = await f.posts.createPost(author, "FOLLOWERS", "P1");
  const comments = await CommentService.open(f.db.pool, { hooks: f.hooks });
  await comments.create(other, post.postId, "before the block");
  // The block parks inside relation_block, its events written, before it returns and commits.
  const blocking = f.rel.block(author, reader);
  await blockParked.parked();
  return { f, author, reader, other, post, comments, blockParked, blocking };
}

test("30-beyond-1 comments: a comment created during a block waits for it and is never shown to the blocked reader", async (t) => {
  const { f, reader, other, post, comments, blockParked, blocking } = await revocationFixture(t);
  const creating = comments.create(other, post.postId, "after the block");
  const wait = await waitForAnyLockWait(f.db.pool); // the comment's token read waits for the block
  await blockParked.release();
  const block = await blocking;
  const late = await creating;
  const { rows } = await f.db.pool.query<{ acl_token: number }>("SELECT acl_token FROM comment WHERE comment_id = $1", [
    late.id,
  ]);
  assert.equal(rows[0]!.acl_token, block.seq, `the comment's token includes the block (waited on ${wait.locktype})`);
  assert.equal(
    (await f.posts.canRead(reader, post.postId, "CONTENT_TOKEN")).allowed,
    true,
    "the post predates the block: projection still trusted",
  );
  const shown = (
    await comments.listTopLevel(reader, post.postId, { mode: "CONTENT_TOKEN", order: "oldest" })
  ).comments.map((c) => c.body);
  assert.deepEqual(shown, ["before the block"], "the comment created after the block is hidden");
  // Negative control: judged by the projection alone (no token), the blocked reader would see it.
  const leaked = (
    await comments.listTopLevel(reader, post.postId, { mode: "PROJECTION_ONLY", order: "oldest" })
  ).comments.map((c) => c.body);
  assert.deepEqual(leaked, ["before the block", "after the block"], "the projection still says 'follows'");
});

test("30-beyond-1 comments: a blocked reader's comment racing the block waits for it and is refused, writing nothing", async (t) => {
  const { f, reader, post, comments, blockParked, blocking } = await revocationFixture(t);
  const creating = comments.create(reader, post.postId, "sneaking in");
  await waitForAnyLockWait(f.db.pool);
  await blockParked.release();
  await blocking;
  await assert.rejects(creating, PostNotFoundError);
  const { rows } = await f.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM comment WHERE author = $1", [
    reader,
  ]);
  assert.equal(rows[0]!.n, 0);
});
