/**
 * Hot authors (docs/feed.md, "Hot authors"): an author with at least LEDGER_FEED_HOT_FOLLOWERS
 * followers (3 here) is not fanned out; each home page merges its posts at read time.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import { readHomeTimeline } from "../../src/feed/feed-reads.ts";
import type { Pool } from "../../src/db/pool.ts";
import type { Ledger } from "../../src/ledger.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { drainFeed, feedClean, feedFixture } from "./fixture.ts";
import { homePageWithoutDedup, mergedWithoutReadTimeRule, truthWithHotAuthors } from "./negative-controls.ts";

const HOT = 3;
const PEOPLE = ["hot", "warm", "cold", "ann", "bob", "cat", "dan", "eve", "fay"];

async function timelineIds(ledger: Ledger, reader: string): Promise<string[]> {
  return (await readHomeTimeline(ledger.pool, reader, { limit: 200 })).entries.map((e) => e.post.postId);
}

async function inboxReaders(pool: Pool, postId: string): Promise<string[]> {
  const { rows } = await pool.query<{ reader: string }>(
    "SELECT reader FROM feed_inbox WHERE post_id = $1 ORDER BY reader",
    [postId],
  );
  return rows.map((r) => r.reader);
}

async function hotAuthors(pool: Pool): Promise<string[]> {
  return (await pool.query<{ author: string }>("SELECT author FROM feed_hot_author ORDER BY 1")).rows.map(
    (r) => r.author,
  );
}

test("a hot author's post is on its followers' home pages without an inbox row; the audit leaves it out and still sees an injected or removed row", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { hotFollowers: HOT });
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  for (const f of ["ann", "bob", "cat"]) await ledger.relations.follow(f, "hot");
  await ledger.relations.follow("ann", "cold");
  await drainFeed(ledger);
  const post = await ledger.posts.createPost("hot", "PUBLIC", "to many");
  const coldPost = await ledger.posts.createPost("cold", "PUBLIC", "to one");
  await drainFeed(ledger);

  assert.deepEqual(await hotAuthors(pool), ["hot"]);
  assert.deepEqual(await inboxReaders(pool, post.postId), ["hot"], "only the author's own inbox holds it");
  for (const reader of ["bob", "cat"]) assert.deepEqual(await timelineIds(ledger, reader), [post.postId], reader);
  assert.deepEqual(await timelineIds(ledger, "ann"), [coldPost.postId, post.postId]);
  assert.deepEqual(await timelineIds(ledger, "hot"), [post.postId]);
  assert.deepEqual(await timelineIds(ledger, "dan"), [], "not a follower");
  // A new follow of a hot author merges nothing into the inbox; the page has the post at once.
  await ledger.relations.follow("dan", "hot");
  await drainFeed(ledger);
  assert.deepEqual(await inboxReaders(pool, post.postId), ["hot"]);
  assert.deepEqual(await timelineIds(ledger, "dan"), [post.postId]);
  const clean = await auditFeed(pool, ledger.feed.maxItems);
  assert.ok(await feedClean(ledger), JSON.stringify(clean));

  // The audit catches a lie: an inbox row of the hot author's post, and a cold post's row removed.
  await pool.query(
    "INSERT INTO feed_inbox (reader, post_id, author, at) SELECT 'bob', post_id, author, created_at FROM post WHERE post_id = $1",
    [post.postId],
  );
  await pool.query("DELETE FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [coldPost.postId]);
  const lies = await auditFeed(pool, ledger.feed.maxItems);
  assert.deepEqual([lies.extra, lies.missing, lies.explainedByPending], [1, 1, 0]);
  await ledger.feedRebuild.rebuild();
  assert.ok(await feedClean(ledger));

  // Negative control: the truth without the exclusion expects the hot post in each follower's
  // inbox, so the audit would report every merged post as missing.
  await truthWithHotAuthors(pool);
  const unaware = await auditFeed(pool, ledger.feed.maxItems);
  assert.equal(unaware.missing, 4, JSON.stringify(unaware));
});

test("a hot author's SELF, deleted, blocked and unfollowed posts never show on a home page; without the read-time rule the merge would show them", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { hotFollowers: HOT });
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  for (const f of ["ann", "bob", "cat", "dan", "eve"]) await ledger.relations.follow(f, "hot");
  await drainFeed(ledger);
  const pub = await ledger.posts.createPost("hot", "PUBLIC", "public");
  const followers = await ledger.posts.createPost("hot", "FOLLOWERS", "followers");
  const self = await ledger.posts.createPost("hot", "SELF", "mine");
  const gone = await ledger.posts.createPost("hot", "PUBLIC", "deleted");
  await ledger.posts.deletePost("hot", gone.postId);
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), ["hot"]);
  assert.deepEqual(await timelineIds(ledger, "ann"), [followers.postId, pub.postId]);
  assert.deepEqual(await timelineIds(ledger, "hot"), [self.postId, followers.postId, pub.postId]);

  await ledger.relations.unfollow("bob", "hot");
  await ledger.relations.block("hot", "cat");
  await ledger.relations.block("dan", "hot");
  // Read before and after the feed consumers apply these: the merge never waits for them.
  for (const drained of [false, true]) {
    if (drained) await drainFeed(ledger);
    for (const reader of ["bob", "cat", "dan"]) {
      assert.deepEqual(await timelineIds(ledger, reader), [], `${reader}, drained=${drained}`);
      const leak = await mergedWithoutReadTimeRule(pool, reader);
      for (const p of [pub, followers, self, gone]) assert.ok(leak.includes(p.postId), `negative control: ${reader}`);
    }
    assert.deepEqual(await timelineIds(ledger, "ann"), [followers.postId, pub.postId]);
    assert.ok((await mergedWithoutReadTimeRule(pool, "ann")).includes(self.postId), "negative control: ann");
  }
  assert.ok(await feedClean(ledger));
});

test("an author crossing the threshold either way: judged when its post events are applied; cold posts stay in inboxes, hot ones are merged, a cooled author's posts are merged back into its followers' inboxes", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { hotFollowers: HOT });
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  await ledger.relations.follow("ann", "warm");
  await ledger.relations.follow("bob", "warm");
  await drainFeed(ledger);
  const a1 = await ledger.posts.createPost("warm", "PUBLIC", "cold one");
  await drainFeed(ledger);
  assert.deepEqual(await inboxReaders(pool, a1.postId), ["ann", "bob", "warm"]);

  // The third follower makes warm hot, but only its next post event changes its state.
  await ledger.relations.follow("cat", "warm");
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), []);
  assert.deepEqual(await inboxReaders(pool, a1.postId), ["ann", "bob", "cat", "warm"], "a cold author's follow merges");
  const a2 = await ledger.posts.createPost("warm", "FOLLOWERS", "hot one");
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), ["warm"]);
  assert.deepEqual(await inboxReaders(pool, a1.postId), ["warm"], "heated: its rows left the followers' inboxes");
  assert.deepEqual(await inboxReaders(pool, a2.postId), ["warm"]);
  await ledger.relations.follow("dan", "warm");
  await drainFeed(ledger);
  for (const reader of ["ann", "bob", "cat", "dan"])
    assert.deepEqual(await timelineIds(ledger, reader), [a2.postId, a1.postId], reader);
  assert.ok(await feedClean(ledger));

  // Down to two followers: still merged until warm's next post event, then merged back.
  await ledger.relations.unfollow("bob", "warm");
  await ledger.relations.unfollow("cat", "warm");
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), ["warm"]);
  assert.deepEqual(await timelineIds(ledger, "dan"), [a2.postId, a1.postId]);
  assert.deepEqual(await timelineIds(ledger, "bob"), []);
  const a3 = await ledger.posts.createPost("warm", "PUBLIC", "cold again");
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), []);
  for (const p of [a1, a2, a3]) assert.deepEqual(await inboxReaders(pool, p.postId), ["ann", "dan", "warm"], p.body);
  for (const reader of ["ann", "dan"])
    assert.deepEqual(await timelineIds(ledger, reader), [a3.postId, a2.postId, a1.postId], reader);
  assert.ok(await feedClean(ledger));
});

test("negative control: without the merge back on cooling, the posts made while hot leave the followers' pages and the audit sees them missing", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { hotFollowers: HOT });
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  await replaceFunctionText(pool, "feed_hot_transition_plan(text[], text[], integer)", [
    [
      "ORDER BY t.at DESC, t.post_id DESC LIMIT p_max) t",
      "ORDER BY t.at DESC, t.post_id DESC LIMIT p_max) t WHERE false",
    ],
  ]);
  for (const f of ["ann", "bob", "cat"]) await ledger.relations.follow(f, "warm");
  await drainFeed(ledger);
  const a1 = await ledger.posts.createPost("warm", "PUBLIC", "hot one");
  await drainFeed(ledger);
  await ledger.relations.unfollow("cat", "warm");
  await drainFeed(ledger);
  const a2 = await ledger.posts.createPost("warm", "PUBLIC", "cold again");
  await drainFeed(ledger);
  assert.deepEqual(await timelineIds(ledger, "ann"), [a2.postId], "a1 is lost without the merge back");
  assert.equal(a1.author, "warm");
  const audit = await auditFeed(pool, ledger.feed.maxItems);
  assert.equal(audit.missing, 2, JSON.stringify(audit));
});

test("keyset pages across merged and inbox rows neither repeat nor skip while posts arrive and an author heats and cools between pages; a post in both is shown once", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { hotFollowers: HOT });
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  for (const f of ["ann", "bob", "cat"]) await ledger.relations.follow(f, "hot");
  for (const a of ["warm", "cold"]) await ledger.relations.follow("ann", a);
  await ledger.relations.follow("bob", "warm");
  await drainFeed(ledger);
  const made: string[] = [];
  for (let i = 0; i < 6; i++) {
    for (const author of ["hot", "warm", "cold", "ann"]) {
      made.push((await ledger.posts.createPost(author, "PUBLIC", `${author} ${i}`)).postId);
    }
  }
  await drainFeed(ledger);
  assert.deepEqual(await hotAuthors(pool), ["hot"]);
  const expected = made.slice().reverse();
  assert.deepEqual(await timelineIds(ledger, "ann"), expected);

  // Between pages: new posts by everyone; warm heats (a third follower, then a post); warm cools
  // (a follower leaves, then a post). Every page is read after the consumers have applied them.
  const between = [
    async () => {
      await ledger.posts.createPost("hot", "PUBLIC", "new hot");
      await ledger.posts.createPost("cold", "PUBLIC", "new cold");
    },
    async () => {
      await ledger.relations.follow("cat", "warm");
      await drainFeed(ledger);
      await ledger.posts.createPost("warm", "PUBLIC", "heats");
    },
    async () => {
      await ledger.posts.createPost("ann", "PUBLIC", "mine");
    },
    async () => {
      await ledger.relations.unfollow("cat", "warm");
      await drainFeed(ledger);
      await ledger.posts.createPost("warm", "PUBLIC", "cools");
    },
  ];
  const seen: string[] = [];
  const states: string[][] = [];
  let cursor: string | undefined;
  for (let page = 0; ; page++) {
    const p = await readHomeTimeline(pool, "ann", { limit: 5, ...(cursor ? { cursor } : {}) });
    seen.push(...p.entries.map((e) => e.post.postId));
    cursor = p.nextCursor;
    if (!cursor) break;
    await between[page % between.length]!();
    await drainFeed(ledger);
    states.push(await hotAuthors(pool));
  }
  assert.deepEqual(seen, expected, "no repeat, no gap");
  assert.ok(
    states.some((s) => s.includes("warm")),
    "warm was hot between two pages",
  );
  assert.deepEqual(await hotAuthors(pool), ["hot"], "and cold again at the end");
  assert.ok(await feedClean(ledger));

  // A post both in the inbox and merged (an inbox row left by a rebuild racing the heating) shows once.
  const hotPost = made[made.length - 4]!;
  await pool.query(
    "INSERT INTO feed_inbox (reader, post_id, author, at) SELECT 'ann', post_id, author, created_at FROM post WHERE post_id = $1",
    [hotPost],
  );
  const page = await timelineIds(ledger, "ann");
  assert.equal(page.filter((id) => id === hotPost).length, 1);
  assert.equal((await homePageWithoutDedup(pool, "ann")).filter((id) => id === hotPost).length, 2, "negative control");
});
