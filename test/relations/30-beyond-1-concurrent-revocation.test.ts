import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { acct, relationsFixture, scalar } from "./fixture.ts";

/**
 * Beyond the chapter (its own stated gap): a block has taken seq k+1 but not committed when
 * the post reads its token. The chapter's unlocked read gets k; the block commits before the
 * post; the projection has reached k; CONTENT_TOKEN then trusts the projection and shows the
 * post to the reader the block was meant to stop. FOR SHARE waits for the block instead.
 * "share" is PostService's default, the one the API's ledger opens (openLedger passes no
 * tokenRead), and the test races exactly that default: f.posts is opened the same way.
 */
async function scenario(tokenRead: "default share" | "plain", t: import("node:test").TestContext) {
  const f = await relationsFixture(1, 400, [300]);
  // Armed from the start; the first transaction to reach it is the block below.
  const blockParked = await SqlHook.arm(f.db.pool, "block.beforeCommit");
  const postParked = new Gate("post.afterToken");
  t.after(async () => {
    await blockParked.release();
    postParked.release();
    await f.close();
  });
  const author = acct(300);
  const reader = acct(342);
  await f.rel.follow(reader, author);
  await f.rel.decide(author, reader, true);
  await f.projector.drain();
  const posts = tokenRead === "plain" ? await f.postsWith({ tokenRead }) : f.posts;

  // The block parks inside relation_block (block.beforeCommit), holding
  // event_seq's row lock with seq k+1 taken.
  const blocking = f.rel.block(author, reader);
  await blockParked.parked();

  let creating;
  let waited = "no";
  if (tokenRead === "plain") {
    const offPost = f.hooks.on("post.afterToken", postParked.handler);
    creating = posts.createPost(author, "FOLLOWERS", "P2");
    await postParked.waitArrived(); // token read: k
    offPost();
    await blockParked.release();
    await blocking; // the block commits before the post
    postParked.release();
  } else {
    creating = posts.createPost(author, "FOLLOWERS", "P2");
    const wait = await waitForAnyLockWait(f.db.pool); // the post waits for the block
    waited = `${wait.locktype} granted=${wait.granted}`;
    await blockParked.release();
    await blocking;
  }
  const post = await creating;
  const block = await blocking;
  const watermark = await scalar(f, "SELECT applied_upto AS n FROM proj_watermark WHERE part = 0");
  const decision = await posts.canRead(reader, post.postId, "CONTENT_TOKEN");
  t.diagnostic(
    `note ${tokenRead}: block seq=${block.seq} post token=${post.aclToken} watermark=${watermark} post waited on lock: ${waited} -> CONTENT_TOKEN ${decision.allowed ? "ALLOW" : "DENY"}/${decision.source}`,
  );
  return { post, block, decision, watermark };
}

test("30-beyond-1 P=1 concurrent revocation, the chapter's unlocked token read (negative control): P2 leaks", async (t) => {
  const { post, block, decision } = await scenario("plain", t);
  assert.equal(post.aclToken, block.seq - 1);
  assert.equal(decision.allowed, true, "the blocked reader sees a post created after the block committed");
});

test("30-beyond-1 P=1 concurrent revocation, PostService's default token read (FOR SHARE): the post waits for the block and P2 is denied", async (t) => {
  const { post, block, decision } = await scenario("default share", t);
  assert.equal(post.aclToken, block.seq);
  assert.deepEqual(decision, { allowed: false, source: "fallback-truth" });
});
