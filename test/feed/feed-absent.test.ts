import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import { DEFAULT_FEED_ABSENT_MS, FeedAbsence } from "../../src/feed/feed-absence.ts";
import { FeedConsumers } from "../../src/feed/feed-consumer.ts";
import { readHomeTimeline } from "../../src/feed/feed-reads.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { drainFeed, feedFixture, inboxRows, type FeedFixture } from "./fixture.ts";
import { planSkippingAbsentBeforeLock } from "./negative-controls.ts";

/** The reader last read longer ago than LEDGER_FEED_ABSENT_MS (its clock set back, as eight days of absence would). */
async function makeAbsent(pool: Pool, reader: string): Promise<void> {
  await pool.query("UPDATE feed_reader SET last_read_at = now() - interval '8 days' WHERE reader = $1", [reader]);
}

async function readerState(pool: Pool, reader: string): Promise<{ skipped: boolean; xmin: string }> {
  const { rows } = await pool.query<{ skipped: boolean; xmin: string }>(
    "SELECT skipped_since IS NOT NULL AS skipped, xmin::text AS xmin FROM feed_reader WHERE reader = $1",
    [reader],
  );
  return rows[0]!;
}

async function inboxOf(pool: Pool, reader: string): Promise<string[]> {
  return (await inboxRows(pool)).filter((r) => r.startsWith(`${reader} `)).map((r) => r.split(" ")[1]!);
}

/** ann follows bob, both have read; bob's first post is in ann's inbox; then ann goes absent and bob posts again. */
async function absentAnn(fx: FeedFixture): Promise<{ first: string; second: string }> {
  const { ledger } = fx;
  await ledger.relations.follow("ann", "bob");
  const first = (await ledger.posts.createPost("bob", "FOLLOWERS", "before the absence")).postId;
  await drainFeed(ledger);
  await makeAbsent(fx.db.pool, "ann");
  const second = (await ledger.posts.createPost("bob", "FOLLOWERS", "while ann is away")).postId;
  await drainFeed(ledger);
  return { first, second };
}

test("fan-out skips an absent reader and marks the inbox skipped; the audit counts no missing row there but still sees a lie in a complete or a skipped inbox; the next read installs the inbox, and a present reader's reads write nothing", async (t) => {
  const fx = await feedFixture(2, ["ann", "bob", "cat"]);
  t.after(() => fx.close());
  const { ledger } = fx;
  const pool = fx.db.pool;
  const { first, second } = await absentAnn(fx);

  assert.deepEqual(await inboxOf(pool, "ann"), [first], "the post after the absence was not written to ann");
  assert.deepEqual((await inboxOf(pool, "bob")).sort(), [first, second].sort(), "bob, present, got his own post");
  assert.equal((await readerState(pool, "ann")).skipped, true);
  const audit = await auditFeed(pool, ledger.feed.maxItems);
  assert.equal(audit.missing, 0, "a skipped inbox's missing rows are not drift");
  assert.equal(audit.extra, 0);
  assert.equal(audit.skippedReaders, 1);

  // A lie in a complete inbox (bob's) and one in the skipped inbox (a post ann may not read) are both caught.
  await pool.query("DELETE FROM feed_inbox WHERE reader = 'bob' AND post_id = $1", [first]);
  const cats = (await ledger.posts.createPost("cat", "PUBLIC", "not followed by ann")).postId;
  await drainFeed(ledger);
  await pool.query(
    "INSERT INTO feed_inbox (reader, post_id, author, at) SELECT 'ann', post_id, author, created_at FROM post WHERE post_id = $1",
    [cats],
  );
  const lies = await auditFeed(pool, ledger.feed.maxItems);
  assert.equal(lies.missing, 1, "the row taken from bob's complete inbox");
  assert.equal(lies.extra, 1, "the row ann's skipped inbox may not hold");
  await pool.query("DELETE FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [cats]);
  await ledger.feedRebuild.rebuild({ readers: ["bob"] });
  await makeAbsent(pool, "ann");

  const returned = await ledger.feedAbsence.returnReader("ann");
  assert.deepEqual(returned, { complete: true, rebuilt: true });
  assert.deepEqual((await inboxOf(pool, "ann")).sort(), [first, second].sort());
  const after = await readerState(pool, "ann");
  assert.equal(after.skipped, false);
  const clean = await auditFeed(pool, ledger.feed.maxItems);
  assert.deepEqual([clean.extra, clean.missing, clean.skippedReaders], [0, 0, 0]);

  // Present now: a read writes nothing (the row version is the same), and fan-out reaches ann again.
  assert.deepEqual(await ledger.feedAbsence.returnReader("ann"), { complete: true, rebuilt: false });
  assert.equal((await readerState(pool, "ann")).xmin, after.xmin, "a present reader's read did not write its row");
  const third = (await ledger.posts.createPost("bob", "FOLLOWERS", "ann is back")).postId;
  await drainFeed(ledger);
  assert.ok((await inboxOf(pool, "ann")).includes(third));
});

test("a post committed while a returning reader's inbox is installed is not lost: its fan-out waits for the reader's row (pg_locks) and then sees the reader present; negative control: deciding absence in the plan, before the lock, loses it and the audit sees the missing row", async (t) => {
  for (const variant of ["after the lock", "in the plan"] as const) {
    await t.test(variant, async () => {
      const hooks = new Hooks();
      const fx = await feedFixture(1, ["ann", "bob"], { hooks });
      try {
        const { ledger } = fx;
        const pool = fx.db.pool;
        const { first, second } = await absentAnn(fx);
        const consumers =
          variant === "after the lock"
            ? ledger.feed
            : new FeedConsumers(pool, { hooks, plan: planSkippingAbsentBeforeLock(DEFAULT_FEED_ABSENT_MS) });

        // The read's install has read the truth (first, second) and holds ann's row, uncommitted.
        const installGate = new Gate("feed.return.beforeCommit");
        hooks.on("feed.return.beforeCommit", installGate.handler);
        const returning = ledger.feedAbsence.returnReader("ann");
        await installGate.waitArrived();
        const third = (await ledger.posts.createPost("bob", "FOLLOWERS", "while ann's inbox is installed")).postId;

        let consumerPid: number | undefined;
        hooks.on("feed.consumer.afterLock", (c) => {
          consumerPid = c.pid as number;
        });
        const fanOut = consumers.consumer("posts").drain();
        if (variant === "after the lock") {
          const wait = await waitForLockWait(pool, () => consumerPid);
          assert.equal(wait.granted, false, "the fan-out waits for ann's row, held by the install");
        } else {
          await fanOut; // ann was left out of the plan: nothing to wait for
        }
        installGate.release();
        assert.deepEqual(await returning, { complete: true, rebuilt: true });
        await fanOut;

        const audit = await auditFeed(pool, ledger.feed.maxItems);
        if (variant === "after the lock") {
          assert.deepEqual((await inboxOf(pool, "ann")).sort(), [first, second, third].sort());
          assert.deepEqual([audit.extra, audit.missing, audit.skippedReaders], [0, 0, 0]);
          const page = await readHomeTimeline(pool, "ann", { limit: 10 });
          assert.deepEqual(
            page.entries.map((e) => e.post.postId),
            [third, second, first],
          );
        } else {
          assert.ok(!(await inboxOf(pool, "ann")).includes(third), "negative control: the post is lost");
          assert.equal(audit.missing, 1, "negative control: the audit sees the row missing from a complete inbox");
        }
      } finally {
        await fx.close();
      }
    });
  }
});

test("a fan-out that skipped the reader and has not committed holds the reader's row: the read's install waits for it (pg_locks) and then includes the post; past LEDGER_FEED_RETURN_REBUILD_MS the read answers incomplete, commits nothing, and the next read installs", async (t) => {
  const hooks = new Hooks();
  const fanOutGate = new Gate("feed.consumer.beforeCommit");
  const fx = await feedFixture(1, ["ann", "bob"], { hooks });
  t.after(async () => {
    fanOutGate.release(); // a failed assertion must not leave the fan-out parked while the pool closes
    await fx.close();
  });
  const { ledger } = fx;
  const pool = fx.db.pool;
  const { first, second } = await absentAnn(fx);
  const third = (await ledger.posts.createPost("bob", "FOLLOWERS", "fanned out while ann returns")).postId;

  hooks.on("feed.consumer.beforeCommit", fanOutGate.handler);
  const fanOut = ledger.feed.consumer("posts").drain();
  await fanOutGate.waitArrived();

  // Bounded: a short bound runs out on the held row; nothing is committed, ann stays skipped.
  const hurried = new FeedAbsence(pool, { rebuildMs: 100 });
  const late = await hurried.returnReader("ann");
  assert.deepEqual(late, { complete: false, retryAfterMs: 100 });
  assert.equal((await readerState(pool, "ann")).skipped, true);

  let readPid: number | undefined;
  const readHooks = new Hooks();
  readHooks.on("feed.return.beforeLock", (c) => {
    readPid = c.pid as number;
  });
  const reading = new FeedAbsence(pool, { hooks: readHooks }).returnReader("ann");
  const wait = await waitForLockWait(pool, () => readPid);
  assert.equal(wait.granted, false, "the install waits for the fan-out's hold on ann's row");
  fanOutGate.release();
  await fanOut;
  assert.deepEqual(await reading, { complete: true, rebuilt: true });
  assert.deepEqual((await inboxOf(pool, "ann")).sort(), [first, second, third].sort());
  const audit = await auditFeed(pool, ledger.feed.maxItems);
  assert.deepEqual([audit.extra, audit.missing], [0, 0]);
});

test("crash safety: a batch that dies after skipping leaves neither the skip nor its mark; an install whose backend is killed before its commit leaves the reader skipped and the inbox as it was, and the next read installs it", async (t) => {
  const hooks = new Hooks();
  const installGate = new Gate("feed.return.beforeCommit");
  const fx = await feedFixture(1, ["ann", "bob"], { hooks });
  t.after(async () => {
    installGate.release();
    await fx.close();
  });
  const { ledger } = fx;
  const pool = fx.db.pool;
  await ledger.relations.follow("ann", "bob");
  const first = (await ledger.posts.createPost("bob", "FOLLOWERS", "before the absence")).postId;
  await drainFeed(ledger);
  await makeAbsent(pool, "ann");
  const second = (await ledger.posts.createPost("bob", "FOLLOWERS", "while ann is away")).postId;

  const off = hooks.on("feed.consumer.beforeCommit", () => {
    throw new Error("crash before commit");
  });
  await assert.rejects(ledger.feed.consumer("posts").pollOnce([0]), /crash before commit/);
  off();
  assert.equal((await readerState(pool, "ann")).skipped, false, "the mark rolled back with the batch");
  await drainFeed(ledger);
  assert.equal((await readerState(pool, "ann")).skipped, true);
  assert.deepEqual(await inboxOf(pool, "ann"), [first]);

  hooks.on("feed.return.beforeCommit", installGate.handler);
  const returning = ledger.feedAbsence.returnReader("ann");
  const parked = await installGate.waitArrived();
  await pool.query("SELECT pg_terminate_backend($1)", [parked.pid]);
  installGate.release();
  await assert.rejects(returning);
  hooks.on("feed.return.beforeCommit", () => undefined);
  assert.equal((await readerState(pool, "ann")).skipped, true, "the killed install committed nothing");
  assert.deepEqual(await inboxOf(pool, "ann"), [first]);

  assert.deepEqual(await ledger.feedAbsence.returnReader("ann"), { complete: true, rebuilt: true });
  assert.deepEqual((await inboxOf(pool, "ann")).sort(), [first, second].sort());
});
