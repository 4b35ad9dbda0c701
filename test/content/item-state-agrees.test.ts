/**
 * item_state (SQL, src/db/schema.sql) is the rule the like routes ask for every item kind. Posts and
 * comments have their own reads too (PostService.canRead, the comment lists' statement), kept
 * apart because they run per row or report how they decided; this test holds the three to one
 * rule: for every reader, post, comment and read mode, in three states of the projection (behind,
 * caught up, behind an unfollow), item_state says VISIBLE exactly when canRead allows the post and
 * exactly when the reader's comment list shows the comment.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { openLedger } from "../../src/ledger.ts";
import { READ_MODES } from "../../src/content/post-types.ts";
import { createTestDatabase } from "../support/test-db.ts";

test("item_state agrees with PostService.canRead for posts and with the comment lists for comments, in every read mode", async (t) => {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  const readers = ["alice", "fan", "carl", "nobody", "banned", "xavier", "leaver"];
  await db.pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[])", [readers]);
  for (const follower of ["fan", "carl", "leaver"]) await ledger.relations.follow(follower, "alice");
  await ledger.relations.block("alice", "banned");
  await ledger.relations.block("carl", "xavier");
  const posts: string[] = [];
  const comments: { id: string; postId: string }[] = [];
  for (const visibility of ["PUBLIC", "FOLLOWERS", "SELF"] as const) {
    const post = await ledger.posts.createPost("alice", visibility, visibility);
    posts.push(post.postId);
    const commenter = visibility === "SELF" ? "alice" : "carl";
    comments.push({
      id: (await ledger.comments.create(commenter, post.postId, `by ${commenter}`)).id,
      postId: post.postId,
    });
  }
  const state = async (reader: string, item: string, mode: string) =>
    (await db.pool.query<{ s: string }>("SELECT item_state($1, $2, $3) AS s", [reader, item, mode])).rows[0]!.s;

  const compare = async (phase: string): Promise<Map<string, string>> => {
    const seen = new Map<string, string>();
    for (const reader of readers) {
      for (const mode of READ_MODES) {
        for (const postId of posts) {
          const s = await state(reader, postId, mode);
          const allowed = (await ledger.posts.canRead(reader, postId, mode)).allowed;
          assert.equal(
            s === "VISIBLE",
            allowed,
            `${phase}: post ${postId} as ${reader} in ${mode}: item_state ${s}, canRead ${allowed}`,
          );
          seen.set(`${reader}/${postId}/${mode}`, s);
        }
        for (const c of comments) {
          const s = await state(reader, c.id, mode);
          const listed = (await ledger.comments.listTopLevel(reader, c.postId, { mode })).comments.some(
            (x) => x.id === c.id,
          );
          assert.equal(
            s === "VISIBLE",
            listed,
            `${phase}: comment ${c.id} as ${reader} in ${mode}: item_state ${s}, listed ${listed}`,
          );
          seen.set(`${reader}/${c.id}/${mode}`, s);
        }
      }
    }
    return seen;
  };

  await compare("projection behind");
  await ledger.projector.drain();
  await compare("projection caught up");
  await ledger.relations.unfollow("leaver", "alice");
  const behindUnfollow = await compare("projection behind an unfollow");
  // Control: the modes really differ here, so agreeing is not agreeing by ignoring the mode.
  const truth = [...behindUnfollow].filter(([k]) => k.endsWith("/TRUTH"));
  const differs = truth.filter(([k, s]) => behindUnfollow.get(k.replace(/TRUTH$/, "PROJECTION_ONLY")) !== s);
  assert.ok(differs.length > 0, "some item is visible in PROJECTION_ONLY and not in TRUTH");
  // And every kind of answer occurs.
  assert.deepEqual(new Set(behindUnfollow.values()), new Set(["VISIBLE", "HIDDEN"]));
});
