import { test } from "node:test";
import assert from "node:assert/strict";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { MAX_MENTIONS, parseMentions } from "../../src/content/mentions.ts";
import type { Ledger } from "../../src/ledger.ts";
import { auditNotifications, notificationAuditClean } from "../../src/notifications/notification-audit.ts";
import { listNotificationGroups } from "../../src/notifications/notification-reads.ts";
import { drainAll, factRows, notificationFixture, viewRows, viewRowsWithIds } from "./fixture.ts";

const PEOPLE = ["ann", "bob", "cat", "dan", "eve", "fay"];

/** What `reader` sees: one line per group, type, item and post. */
async function seen(ledger: Ledger, reader: string): Promise<string[]> {
  const page = await listNotificationGroups(ledger.pool, reader, { limit: 200 });
  return page.groups
    .map((g) => `${g.type} ${g.sampleAccountIds.join(",")} ${g.itemId ?? "-"} ${g.postId ?? "-"}`)
    .sort();
}

async function mentionsOf(ledger: Ledger, itemId: string): Promise<string[]> {
  const { rows } = await ledger.pool.query<{ account: string }>(
    "SELECT account FROM mention WHERE item_id = $1 ORDER BY account",
    [itemId],
  );
  return rows.map((r) => r.account);
}

test("parseMentions: id rules, no mention inside a word or an address, a trailing full stop tried both ways, distinct, capped", () => {
  assert.deepEqual(parseMentions("hi @bob and @cat-2, @bob again"), [["bob"], ["cat-2"]]);
  assert.deepEqual(parseMentions("mail ann@example.org or x@y"), [], "an @ inside a word is no mention");
  assert.deepEqual(parseMentions("thanks @bob."), [["bob.", "bob"]]);
  assert.deepEqual(parseMentions("@a:b@c end"), [["a:b@c"]], "ids may hold : and @");
  assert.deepEqual(parseMentions("@ alone, @-x, @.y"), [], "an id starts with a letter or digit");
  assert.deepEqual(parseMentions(`@${"x".repeat(129)}`), [], "longer than an id can be");
  const many = Array.from({ length: MAX_MENTIONS + 5 }, (_, i) => `@u${i}`).join(" ");
  assert.equal(parseMentions(many).length, MAX_MENTIONS);
});

test("a reply notifies the parent comment's author once, beside the post's author; a top-level comment does not (control); the post's author replied to on their own post gets one comment notification", async (t) => {
  const fx = await notificationFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  const catSays = await ledger.comments.create("cat", post.postId, "first");
  const bobSays = await ledger.comments.create("bob", post.postId, "own");
  await ledger.comments.create("dan", post.postId, "top level");
  const reply = await ledger.comments.create("dan", post.postId, "reply", { parentId: catSays.id });
  const replyToBob = await ledger.comments.create("eve", post.postId, "to bob", { parentId: bobSays.id });
  const ownReply = await ledger.comments.create("cat", post.postId, "me again", { parentId: catSays.id });
  await drainAll(ledger);

  assert.deepEqual(
    await seen(ledger, "cat"),
    [`reply dan ${reply.id} ${post.postId}`],
    "one reply; not the top-level one",
  );
  const bob = await seen(ledger, "bob");
  assert.ok(bob.includes(`comment eve ${replyToBob.id} ${post.postId}`));
  assert.equal(bob.filter((g) => g.includes(replyToBob.id)).length, 1, "one notification for one event and recipient");
  assert.ok(bob.includes(`comment cat ${ownReply.id} ${post.postId}`), "bob: a comment on his post");
  assert.ok(!(await seen(ledger, "cat")).some((g) => g.includes(ownReply.id)), "no one is notified of their own reply");
  // One event, two recipients: the reply's rows.
  const { rows } = await db.pool.query<{ r: string }>(
    "SELECT recipient || ' ' || type AS r FROM notification WHERE subject = $1 ORDER BY 1",
    [reply.id],
  );
  assert.deepEqual(
    rows.map((r) => r.r),
    ["bob comment", "cat reply"],
  );
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));

  // Deleting the reply withdraws both; the audit agrees.
  await ledger.comments.delete("dan", reply.id);
  await drainAll(ledger);
  assert.deepEqual(await seen(ledger, "cat"), []);
  assert.ok(!(await seen(ledger, "bob")).some((g) => g.includes(reply.id)));
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
});

test("mentions: an existing account that may read the item gets one; unknown, self, a block either way, a FOLLOWERS post's non-follower get none (each beside its control)", async (t) => {
  const fx = await notificationFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  await ledger.relations.block("eve", "ann"); // the mentioned blocks the mentioner
  await ledger.relations.block("ann", "fay"); // the mentioner blocks the mentioned
  await ledger.relations.follow("cat", "ann");
  const post = await ledger.posts.createPost("ann", "PUBLIC", "hi @bob. @ann @nobody @eve @fay and ann@cat");
  const followersOnly = await ledger.posts.createPost("ann", "FOLLOWERS", "@cat @dan");
  assert.deepEqual(
    await mentionsOf(ledger, post.postId),
    ["bob"],
    "bob (control); not self, unknown, blocked either way",
  );
  assert.deepEqual(await mentionsOf(ledger, followersOnly.postId), ["cat"], "the follower (control), not dan");
  await drainAll(ledger);
  assert.deepEqual(await seen(ledger, "bob"), [`mention ann ${post.postId} ${post.postId}`]);
  assert.deepEqual(await seen(ledger, "cat"), [`mention ann ${followersOnly.postId} ${followersOnly.postId}`]);
  for (const nobody of ["eve", "fay", "dan"]) assert.deepEqual(await seen(ledger, nobody), [], nobody);
  assert.deepEqual(await seen(ledger, "ann"), ["follow cat - -"], "not notified of mentioning herself");

  // In a comment: the mention obeys the comment's rule too (a block with the comment's author).
  await ledger.relations.block("dan", "cat");
  const comment = await ledger.comments.create("cat", post.postId, "cc @dan @bob @eve @ann");
  assert.deepEqual(
    await mentionsOf(ledger, comment.id),
    ["ann", "bob"],
    "dan blocked the comment's author, eve the post's: none for them",
  );
  await drainAll(ledger);
  assert.ok((await seen(ledger, "bob")).includes(`mention cat ${comment.id} ${post.postId}`));
  assert.deepEqual(
    await seen(ledger, "ann"),
    [`comment cat ${comment.id} ${post.postId}`, "follow cat - -"],
    "ann: one comment, not also a mention",
  );
  assert.deepEqual(await seen(ledger, "eve"), []);
  assert.deepEqual(await seen(ledger, "dan"), []);
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
});

test("mentions are block-aware at read time, and a deleted post or comment withdraws them", async (t) => {
  const fx = await notificationFixture(1, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("ann", "PUBLIC", "@bob @cat");
  const other = await ledger.posts.createPost("dan", "PUBLIC", "x");
  const comment = await ledger.comments.create("eve", other.postId, "@bob look");
  await drainAll(ledger);
  assert.deepEqual(await seen(ledger, "bob"), [
    `mention ann ${post.postId} ${post.postId}`,
    `mention eve ${comment.id} ${other.postId}`,
  ]);
  await ledger.relations.block("bob", "ann");
  assert.deepEqual(
    await seen(ledger, "bob"),
    [`mention eve ${comment.id} ${other.postId}`],
    "hidden at once, no drain",
  );
  await ledger.relations.unblock("bob", "ann");
  assert.equal((await seen(ledger, "bob")).length, 2, "the unblock shows it again: the row stayed");

  await ledger.posts.deletePost("ann", post.postId);
  await ledger.comments.delete("eve", comment.id);
  await drainAll(ledger);
  assert.deepEqual(await seen(ledger, "bob"), []);
  assert.deepEqual(await seen(ledger, "cat"), []);
  const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM notification WHERE active");
  assert.equal(rows[0]!.n, 0, "the rows are inactive, not merely hidden");
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
});

test("rebuild recomputes replies and mentions from the facts; the audit sees a lost mention (negative control) and the rebuild restores it", async (t) => {
  const fx = await notificationFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("ann", "PUBLIC", "@bob @cat @dan");
  const c = await ledger.comments.create("bob", post.postId, "@fay");
  await ledger.comments.create("cat", post.postId, "@eve", { parentId: c.id });
  await drainAll(ledger);
  const exact = await viewRowsWithIds(db.pool);
  assert.equal(exact.length, 8, exact.join("\n"));
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));

  await db.pool.query("DELETE FROM notification WHERE source = 'post' AND recipient = 'cat'");
  await db.pool.query("UPDATE notification SET active = false WHERE type = 'reply'");
  const broken = await auditNotifications(db.pool);
  assert.equal(broken.missing, 2, JSON.stringify(broken));

  const rebuilt = await ledger.notificationRebuild.rebuild();
  assert.deepEqual([rebuilt.rowsDrifted, rebuilt.rowsPending], [2, 0]);
  assert.deepEqual(await viewRowsWithIds(db.pool), exact, "ids and groups as the consumer wrote them");
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
});

test("erasure: erasing the mentioner withdraws its mentions (the others stay); the mention fact stays with the tombstone", async (t) => {
  const fx = await notificationFixture(1, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("eve", "PUBLIC", "@bob");
  const keep = await ledger.posts.createPost("ann", "PUBLIC", "@bob @cat");
  await ledger.comments.create("eve", keep.postId, "@cat");
  await drainAll(ledger);
  assert.equal((await seen(ledger, "bob")).length, 2);
  assert.equal((await ledger.erasure.start("eve", "admin")).outcome, "STARTED");
  assert.equal((await ledger.erasure.run("eve")).phase, "done");
  await drainAll(ledger);
  assert.deepEqual(await seen(ledger, "bob"), [`mention ann ${keep.postId} ${keep.postId}`]);
  assert.deepEqual(await seen(ledger, "cat"), [`mention ann ${keep.postId} ${keep.postId}`]);
  assert.deepEqual(await mentionsOf(ledger, post.postId), ["bob"], "the fact row stays with the tombstone");
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
});

test("the incremental audit follows the post outbox: a lost mention of a post written since the last run is found; one of an older post (control) waits for the full audit", async (t) => {
  const fx = await notificationFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const old = await ledger.posts.createPost("ann", "PUBLIC", "@bob");
  await drainAll(ledger);
  assert.equal((await incrementalAudit(db.pool, { sample: 0 })).clean, true, "the first run (full) is clean");
  const recent = await ledger.posts.createPost("ann", "PUBLIC", "@cat");
  const reply = await ledger.comments.create("dan", recent.postId, "@eve");
  const second = await ledger.comments.create("fay", recent.postId, "re", { parentId: reply.id });
  await drainAll(ledger);
  await db.pool.query("DELETE FROM notification WHERE subject = ANY ($1) AND type IN ('mention', 'reply')", [
    [old.postId, recent.postId, reply.id, second.id],
  ]);
  const rows = await db.pool.query("SELECT 1 FROM notification WHERE subject = ANY ($1)", [[old.postId]]);
  assert.equal(rows.rowCount, 0);
  const report = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(report.notifications.missing, 3, JSON.stringify(report.notifications));
  assert.equal((await auditNotifications(db.pool)).missing, 4, "the full audit sees the old post's too");
});
