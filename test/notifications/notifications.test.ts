import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import type { Ledger } from "../../src/ledger.ts";
import { auditNotifications, notificationAuditClean } from "../../src/notifications/notification-audit.ts";
import { NotificationFeed } from "../../src/notifications/notification-consumer.ts";
import {
  listNotificationGroups,
  markRead,
  unreadCount,
  type NotificationGroup,
} from "../../src/notifications/notification-reads.ts";
import { applyWithoutGuards } from "./negative-controls.ts";
import { pruneRetained } from "../../src/retention/retention.ts";
import {
  backdateFollow,
  backdateLike,
  drainAll,
  factRows,
  notificationFixture,
  redeliverEverything,
  scalar,
  viewRows,
  viewRowsWithIds,
} from "./fixture.ts";

const PEOPLE = ["ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal"];

/**
 * A mix of every kind of fact change: likes and unlikes of posts, comments and a plain item,
 * self-likes, follows, requests, decisions, comments and deletions, replies (to someone else's
 * comment, to the post author's own comment, to one's own) and mentions (in posts and comments,
 * of oneself, of an unknown id, of an account that may not read the post, in a post then deleted).
 */
async function writeMix(ledger: Ledger, round: number): Promise<void> {
  const post = await ledger.posts.createPost("bob", "PUBLIC", `post ${round}`);
  const own = await ledger.posts.createPost("ann", "PUBLIC", `ann ${round}`);
  const comment = await ledger.comments.create("cat", post.postId, `comment ${round}`);
  const selfComment = await ledger.comments.create("bob", post.postId, `self ${round}`);
  await ledger.likes.createItem(`plain-${round}`);
  for (const [i, who] of PEOPLE.entries()) {
    await ledger.likes.like(who, post.postId);
    if (i % 2 === 0) await ledger.likes.like(who, comment.id);
    if (i % 3 === 0) await ledger.likes.like(who, `plain-${round}`);
    if (i % 4 === 1) await ledger.likes.unlike(who, post.postId);
    if (i % 5 === 2) await ledger.likes.like(who, own.postId);
  }
  await ledger.likes.like("dan", post.postId);
  await ledger.likes.unlike("eve", comment.id);
  await ledger.likes.like("eve", comment.id);
  await ledger.likes.like("bob", selfComment.id);
  for (const who of ["ann", "cat", "dan", "eve"]) await ledger.relations.follow(who, "bob");
  for (const who of ["bob", "cat", "dan"]) await ledger.relations.follow(who, "hal");
  await ledger.relations.decide("hal", "bob", true);
  await ledger.relations.decide("hal", "cat", false);
  if (round % 2 === 1) await ledger.relations.unfollow("ann", "bob");
  const late = await ledger.comments.create("dan", post.postId, `late ${round}`);
  await ledger.comments.delete("dan", late.id);
  await ledger.comments.create("eve", own.postId, `to ann ${round}`);
  await ledger.comments.create("dan", post.postId, `re @fay @cat ${round}`, { parentId: comment.id });
  await ledger.comments.create("bob", post.postId, `thanks @dan ${round}`, { parentId: comment.id });
  await ledger.comments.create("cat", post.postId, `re ${round}`, { parentId: selfComment.id });
  await ledger.comments.create("cat", post.postId, `mine ${round}`, { parentId: comment.id });
  const deletedReply = await ledger.comments.create("gus", post.postId, `gone @ann ${round}`, { parentId: comment.id });
  await ledger.comments.delete("gus", deletedReply.id);
  await ledger.posts.createPost("ann", "PUBLIC", `hi @bob @cat. @ann @nobody ${round}`);
  await ledger.posts.createPost("bob", "FOLLOWERS", `to @cat and @gus ${round}`);
  const gone = await ledger.posts.createPost("fay", "PUBLIC", `@hal ${round}`);
  await ledger.posts.deletePost("fay", gone.postId);
}

for (const partitions of [1, 4]) {
  test(`P=${partitions} after a drain the notifications equal the facts (independent SQL); every event redelivered, doubled and out of order changes nothing; a rebuild from the facts equals the incremental view`, async (t) => {
    const fx = await notificationFixture(partitions, PEOPLE, { private: ["hal"] });
    t.after(() => fx.close());
    const { ledger, db } = fx;
    await writeMix(ledger, 0);
    await drainAll(ledger);
    await writeMix(ledger, 1);
    await drainAll(ledger);
    const facts = await factRows(db.pool);
    const view = await viewRows(db.pool);
    t.diagnostic(`note ${facts.length} notifications from the facts`);
    assert.ok(facts.length > 25);
    for (const kind of [/^comment .* reply$/, /^comment .* mention$/, /^post .* mention$/])
      assert.ok(
        facts.some((r) => kind.test(r)),
        `the mix has a ${kind.source} notification`,
      );
    assert.deepEqual(view, facts);
    const audit = await auditNotifications(db.pool);
    assert.ok(notificationAuditClean(audit), JSON.stringify(audit));
    assert.equal(audit.lag, 0);

    const exact = await viewRowsWithIds(db.pool);
    const again = await redeliverEverything(ledger.notifications, partitions);
    t.diagnostic(`note redelivered everything twice over: ${JSON.stringify(again)}`);
    assert.equal(again.applied, 0);
    assert.equal(again.skipped, 0);
    assert.ok(again.dup > 100);
    assert.deepEqual(await viewRowsWithIds(db.pool), exact, "not even an id moved");

    const onTop = await ledger.notificationRebuild.rebuild();
    assert.deepEqual([onTop.rowsDrifted, onTop.rowsPending], [0, 0], "a rebuild over an exact view changes nothing");
    await db.pool.query("DELETE FROM notification");
    const rebuilt = await ledger.notificationRebuild.rebuild();
    t.diagnostic(
      `note rebuild from nothing: ${rebuilt.recipientsChecked} recipients, ${rebuilt.rowsDrifted} rows drifted`,
    );
    assert.deepEqual(
      [rebuilt.rowsDrifted, rebuilt.rowsPending],
      [facts.length, 0],
      "every row was missing with nothing pending: all drift",
    );
    assert.deepEqual(await viewRowsWithIds(db.pool), exact, "rebuild = incremental, ids and groups included");
    assert.deepEqual(
      await redeliverEverything(ledger.notifications, partitions).then((r) => r.applied),
      0,
      "after the rebuild every old event is stale",
    );
    assert.deepEqual(await viewRowsWithIds(db.pool), exact);
  });
}

test("negative control: the apply without dedup and version guard brings an unliked notification back on redelivery; the audit and the fact comparison see it, the real consumer does not", async (t) => {
  const fx = await notificationFixture(1, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  await ledger.likes.like("ann", post.postId);
  await ledger.likes.like("cat", post.postId);
  await ledger.likes.unlike("ann", post.postId);
  await drainAll(ledger);
  const likeEvent = (await ledger.notifications.consumer("likes").fetchRange(0, 1, 1))[0]!;

  const real = await ledger.notifications.consumer("likes").applyBatch([likeEvent]);
  assert.deepEqual([real.applied, real.dup], [0, 1]);
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  assert.equal((await listNotificationGroups(db.pool, "bob")).groups[0]!.notificationsCount, 1);

  const naive = new NotificationFeed(db.pool, { apply: applyWithoutGuards });
  await naive.consumer("likes").applyBatch([likeEvent]);
  const groups = (await listNotificationGroups(db.pool, "bob")).groups;
  t.diagnostic(
    `note after the naive redelivery: count ${groups[0]!.notificationsCount}, sample ${groups[0]!.sampleAccountIds.join(",")}`,
  );
  assert.equal(groups[0]!.notificationsCount, 2, "ann, who unliked, is counted again");
  assert.notDeepEqual(await viewRows(db.pool), await factRows(db.pool));
  const audit = await auditNotifications(db.pool);
  assert.equal(audit.extra, 1);
  assert.equal(notificationAuditClean(audit), false);
});

const HOUR = 3600_000;
const WINDOW = 12 * HOUR;

test("grouping: likes of one post and follows group per 12-hour UTC window (boundary to the microsecond), exact counts, latest accounts newest first, groups newest first; requests and comments are never grouped", async (t) => {
  const likers = Array.from({ length: 11 }, (_, i) => `liker-${String(i).padStart(2, "0")}`);
  const fx = await notificationFixture(4, [...PEOPLE, ...likers], { private: ["hal"] });
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const start = Math.floor(Date.now() / WINDOW) * WINDOW - 4 * WINDOW;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  const other = await ledger.posts.createPost("bob", "PUBLIC", "q");
  // 10 likes in the window [start, start + W), the last one at its very last microsecond; one at start + W.
  for (const [i, who] of likers.entries()) {
    await ledger.likes.like(who, post.postId);
    const at =
      i < 9 ? new Date(start + (i + 1) * HOUR) : i === 9 ? new Date(start + WINDOW - 1) : new Date(start + WINDOW);
    await backdateLike(db.pool, who, post.postId, at);
  }
  await db.pool.query(
    "UPDATE like_fact SET changed_at = changed_at + interval '0.000999 seconds' WHERE user_id = 'liker-09'",
  );
  await db.pool.query(
    "UPDATE like_outbox SET created_at = created_at + interval '0.000999 seconds' WHERE user_id = 'liker-09'",
  );
  await ledger.likes.like("ann", other.postId);
  await backdateLike(db.pool, "ann", other.postId, new Date(start + 2 * HOUR));
  for (const [i, who] of ["ann", "cat", "dan"].entries()) {
    await ledger.relations.follow(who, "bob");
    await backdateFollow(db.pool, who, "bob", new Date(start + WINDOW + (i + 1) * HOUR));
  }
  await ledger.relations.follow("eve", "bob");
  await backdateFollow(db.pool, "eve", "bob", new Date(start + 3 * WINDOW));
  await ledger.comments.create("cat", post.postId, "hello");
  await ledger.comments.create("dan", post.postId, "hello too");
  await ledger.relations.follow("ann", "hal");
  await ledger.relations.follow("bob", "hal");
  await drainAll(ledger);

  const page = await listNotificationGroups(db.pool, "bob");
  const shape = (g: NotificationGroup) => `${g.type}:${g.notificationsCount}:${g.sampleAccountIds.join(",")}`;
  t.diagnostic(`note groups of bob: ${page.groups.map(shape).join(" | ")}`);
  assert.deepEqual(page.groups.map(shape), [
    "comment:1:dan",
    "comment:1:cat",
    "follow:1:eve",
    "follow:3:dan,cat,ann",
    "like:1:liker-10",
    "like:10:liker-09,liker-08,liker-07,liker-06,liker-05,liker-04,liker-03,liker-02",
    "like:1:ann",
  ]);
  const big = page.groups[5]!;
  assert.equal(big.groupKey, `like-${post.postId}-${start / WINDOW}`);
  assert.equal(
    page.groups[4]!.groupKey,
    `like-${post.postId}-${start / WINDOW + 1}`,
    "one microsecond later is the next window",
  );
  assert.ok(
    Math.abs(big.latestNotificationAt.getTime() - (start + WINDOW)) <= 1,
    "a microsecond before the window's end",
  );
  assert.equal(big.oldestNotificationAt.getTime(), start + HOUR);
  assert.ok(big.mostRecentNotificationId > big.oldestNotificationId);
  assert.equal(big.itemId, post.postId);
  const ids = page.groups.map((g) => g.mostRecentNotificationId);
  assert.deepEqual(ids, [...ids].sort().reverse(), "newest group first");
  const hal = await listNotificationGroups(db.pool, "hal");
  assert.deepEqual(hal.groups.map(shape), ["follow_request:1:bob", "follow_request:1:ann"], "requests stand alone");

  // Paging: two groups a page, no group twice, none skipped.
  const seen: string[] = [];
  let cursor: string | undefined;
  do {
    const p = await listNotificationGroups(db.pool, "bob", { limit: 2, ...(cursor ? { cursor } : {}) });
    seen.push(...p.groups.map((g) => g.groupKey));
    cursor = p.nextCursor;
  } while (cursor);
  assert.deepEqual(
    seen,
    page.groups.map((g) => g.groupKey),
  );

  // An unlike decrements its group; the last unlike removes it; an unfollow removes its follow.
  await ledger.likes.unlike("liker-03", post.postId);
  await ledger.likes.unlike("ann", other.postId);
  await ledger.relations.unfollow("cat", "bob");
  await drainAll(ledger);
  const after = await listNotificationGroups(db.pool, "bob");
  t.diagnostic(`note after unlikes and an unfollow: ${after.groups.map(shape).join(" | ")}`);
  assert.deepEqual(after.groups.map(shape).slice(2), [
    "follow:1:eve",
    "follow:2:dan,ann",
    "like:1:liker-10",
    "like:9:liker-09,liker-08,liker-07,liker-06,liker-05,liker-04,liker-02,liker-01",
  ]);
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
});

test("a follow request approved becomes a follow; a rejected or withdrawn one disappears; no one is notified of their own acts", async (t) => {
  const fx = await notificationFixture(4, PEOPLE, { private: ["hal"] });
  t.after(() => fx.close());
  const { ledger, db } = fx;
  for (const who of ["ann", "bob", "cat"]) await ledger.relations.follow(who, "hal");
  await drainAll(ledger);
  const types = async () =>
    (await listNotificationGroups(db.pool, "hal")).groups.map((g) => `${g.type}:${g.sampleAccountIds.join(",")}`);
  assert.deepEqual(await types(), ["follow_request:cat", "follow_request:bob", "follow_request:ann"]);
  await ledger.relations.decide("hal", "ann", true);
  await ledger.relations.decide("hal", "bob", false);
  await ledger.relations.unfollow("cat", "hal");
  await drainAll(ledger);
  assert.deepEqual(await types(), ["follow:ann"]);
  const post = await ledger.posts.createPost("hal", "PUBLIC", "mine");
  await ledger.likes.like("hal", post.postId);
  await ledger.comments.create("hal", post.postId, "me again");
  await drainAll(ledger);
  assert.deepEqual(await types(), ["follow:ann"], "a self-like and a self-comment notify no one");
  assert.equal(await scalar(db.pool, "SELECT count(*) AS n FROM notification WHERE actor = recipient"), 0);
});

test("authorization at read time: blocks hide an actor both ways (counts exclude them exactly), a deleted post hides its likes, a comment that became invisible to its author hides the likes of it", async (t) => {
  const fx = await notificationFixture(4, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  for (const who of ["ann", "cat", "dan"]) await ledger.likes.like(who, post.postId);
  await drainAll(ledger);
  const likes = async () =>
    (await listNotificationGroups(db.pool, "bob")).groups
      .filter((g) => g.type === "like")
      .map((g) => `${g.notificationsCount}:${g.sampleAccountIds.join(",")}`);
  assert.deepEqual(await likes(), ["3:dan,cat,ann"]);
  await ledger.relations.block("bob", "ann");
  assert.deepEqual(await likes(), ["2:dan,cat"], "the reader blocks ann: at once, no drain needed");
  await ledger.relations.block("cat", "bob");
  assert.deepEqual(await likes(), ["1:dan"], "cat blocks the reader");
  assert.equal((await unreadCount(db.pool, "bob")).count, 1);
  await ledger.relations.unblock("bob", "ann");
  assert.deepEqual(await likes(), ["2:dan,ann"]);
  await ledger.relations.block("dan", "bob");
  await ledger.relations.block("bob", "ann");
  assert.deepEqual(await likes(), [], "a group with no visible actor is not shown");
  await ledger.relations.unblock("bob", "ann");
  await ledger.posts.deletePost("bob", post.postId);
  assert.deepEqual(await likes(), [], "a deleted post's likes are gone for the reader");

  // dan's FOLLOWERS post; eve follows dan and comments; fay follows dan and likes eve's comment.
  const followersOnly = await ledger.posts.createPost("dan", "FOLLOWERS", "for followers");
  await ledger.relations.follow("eve", "dan");
  await ledger.relations.follow("fay", "dan");
  await drainAll(ledger);
  const comment = await ledger.comments.create("eve", followersOnly.postId, "hi dan");
  await ledger.likes.setLikedIfVisible("fay", comment.id, true);
  await drainAll(ledger);
  const eve = async () =>
    (await listNotificationGroups(db.pool, "eve")).groups.map((g) => `${g.type}:${g.sampleAccountIds.join(",")}`);
  assert.deepEqual(await eve(), ["like:fay"]);
  await ledger.relations.unfollow("eve", "dan");
  assert.deepEqual(
    await eve(),
    [],
    "eve may no longer read her comment on a followers-only post: its likes are hidden",
  );
  assert.deepEqual(
    (await listNotificationGroups(db.pool, "dan")).groups.map((g) => `${g.type}:${g.notificationsCount}`),
    ["comment:1", "follow:2"],
    "dan still sees eve's comment, and both follows in one group",
  );
  await drainAll(ledger);
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool), "the view keeps the facts; only the read filters");
});

test("unread count and marking read: the marker moves forward only, never past the newest notification; groups say whether they are unread", async (t) => {
  const fx = await notificationFixture(1, PEOPLE);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  for (const who of ["ann", "cat"]) await ledger.likes.like(who, post.postId);
  await ledger.relations.follow("dan", "bob");
  await drainAll(ledger);
  assert.deepEqual(await unreadCount(db.pool, "bob"), { count: 3, groups: 2, lastReadId: null });
  const [follow, like] = (await listNotificationGroups(db.pool, "bob")).groups;
  assert.deepEqual([follow!.type, like!.type, follow!.unread, like!.unread], ["follow", "like", true, true]);
  const marked = await markRead(db.pool, "bob", like!.mostRecentNotificationId);
  assert.deepEqual(marked, { count: 1, groups: 1, lastReadId: like!.mostRecentNotificationId });
  assert.deepEqual(
    (await listNotificationGroups(db.pool, "bob")).groups.map((g) => g.unread),
    [true, false],
  );
  assert.equal(
    (await markRead(db.pool, "bob", like!.oldestNotificationId)).lastReadId,
    like!.mostRecentNotificationId,
    "never backwards",
  );
  const future = `${"9".repeat(16)}-000000000000`;
  assert.equal(
    (await markRead(db.pool, "bob", future)).lastReadId,
    follow!.mostRecentNotificationId,
    "clamped to the newest",
  );
  await ledger.likes.like("eve", post.postId);
  await drainAll(ledger);
  assert.deepEqual(await unreadCount(db.pool, "bob"), {
    count: 1,
    groups: 1,
    lastReadId: follow!.mostRecentNotificationId,
  });
  assert.deepEqual(
    await markRead(db.pool, "ann", future),
    { count: 0, groups: 0, lastReadId: null },
    "no notifications: no marker",
  );
  await assert.rejects(markRead(db.pool, "bob", "0001"), { code: "INVALID_INPUT" });
  await assert.rejects(markRead(db.pool, "bob", 7), { code: "INVALID_INPUT" });
  assert.equal(await scalar(db.pool, "SELECT count(*) AS n FROM notification_marker"), 1, "bad input wrote nothing");
});

/** The outboxes the notification view consumes; the block and account outboxes only wait for webhook cursors. */
const NOTIFIED_KINDS: readonly string[] = ["likes", "relations", "comments", "posts"];

test("the outbox prune waits for the notification watermark; a rebuild that runs beside live consumers ends equal to the facts", async (t) => {
  const fx = await notificationFixture(4, PEOPLE);
  const gate = new Gate("notifications.rebuild.afterSnapshot");
  // The parked rebuild is let go before the pool is closed (closing waits for its connection).
  t.after(async () => {
    gate.release();
    await fx.close();
  });
  const { ledger, db } = fx;
  await writeMix(ledger, 0);
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
  await ledger.feed.drain();
  const margin = { keepLast: 0, keepSeconds: 0 };
  const held = await pruneRetained(db.pool, margin);
  assert.equal(
    held.kinds.filter((k) => NOTIFIED_KINDS.includes(k.kind)).reduce((n, k) => n + k.outboxRows, 0),
    0,
    "the notification view has not consumed them: nothing pruned",
  );
  await ledger.notifications.drain();
  const pruned = await pruneRetained(db.pool, margin);
  t.diagnostic(
    `note pruned after the notification drain: ${pruned.kinds.map((k) => `${k.kind}=${k.outboxRows}`).join(" ")}`,
  );
  assert.ok(pruned.kinds.filter((k) => NOTIFIED_KINDS.includes(k.kind)).every((k) => k.outboxRows > 0));
  assert.equal(
    await scalar(
      db.pool,
      "SELECT (SELECT count(*) FROM notification_like_seen) + (SELECT count(*) FROM notification_relation_seen) + (SELECT count(*) FROM notification_comment_seen) AS n",
    ),
    0,
  );
  assert.deepEqual((await redeliverEverything(ledger.notifications, 4)).applied, 0);

  // A rebuild parked after its snapshot while new facts arrive and the consumer applies them.
  ledger.hooks.on("notifications.rebuild.afterSnapshot", gate.handler);
  const rebuild = ledger.notificationRebuild.rebuild();
  await gate.waitArrived();
  await writeMix(ledger, 1);
  await drainAll(ledger);
  await ledger.likes.unlike(
    "cat",
    (await db.pool.query<{ id: string }>("SELECT post_id AS id FROM post WHERE body = 'post 1'")).rows[0]!.id,
  );
  gate.release();
  const report = await rebuild;
  t.diagnostic(
    `note rebuild beside live traffic: ${report.recipientsChecked} recipients, ${report.rowsDrifted} drifted, ${report.rowsPending} pending`,
  );
  assert.deepEqual(
    [report.rowsDrifted, report.rowsPending],
    [0, 0],
    "nothing the consumer applied after the snapshot was undone",
  );
  await ledger.notifications.drain();
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));
});
