import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { createWorkers } from "../../src/ledger.ts";
import { auditNotifications, notificationAuditClean } from "../../src/notifications/notification-audit.ts";
import { listNotificationGroups } from "../../src/notifications/notification-reads.ts";
import type { Pool } from "../../src/db/pool.ts";
import { RECIPIENT_LOCK_SPACE } from "../../src/notifications/notification-sources.ts";
import { IS_HOOK_WAIT } from "../support/sql-hooks.ts";
import { pollUntil } from "../../support/poll.ts";
import { installOverwrite } from "./negative-controls.ts";
import { readSnapshotSeqs, readTruthRows } from "../../src/notifications/notification-rebuild.ts";
import { drainAll, factRows, notificationFixture, viewRows, viewRowsWithIds } from "./fixture.ts";

const USERS = Array.from({ length: 12 }, (_, i) => `u-${String(i).padStart(2, "0")}`);

/**
 * Waits until `rebuilding` is seen waiting on a lock (pg_locks) or settles, whichever comes
 * first: a rebuild that finishes while a consumer batch holds its recipient's lock did not take
 * that lock (or the batch did not), and the test says so at once instead of waiting out a deadline.
 */
async function waitsOrFinishes(
  pool: Pool,
  rebuilding: Promise<unknown>,
  deadlineMs = 15_000,
): Promise<{ waits: { pid: number; locktype: string; classid: number } } | { finished: true }> {
  let settled = false;
  rebuilding.then(
    () => (settled = true),
    () => (settled = true),
  );
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { rows } = await pool.query<{ pid: number; locktype: string; classid: number }>(
      `SELECT l.pid, l.locktype, l.classid::int FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE NOT l.granted AND NOT ${IS_HOOK_WAIT} AND a.datname = current_database() AND l.pid <> pg_backend_pid()`,
    );
    if (rows[0]) return { waits: rows[0] };
    if (settled) return { finished: true };
    if (Date.now() > deadline)
      throw new Error(
        `the rebuild neither waited on a lock nor finished within ${deadlineMs} ms while a consumer batch was parked holding bob's recipient lock`,
      );
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test("P=4 a rebuild install waits on the recipient lock a consumer batch holds (pg_locks), then sees that batch: nothing lost, nothing undone, no deadlock", async (t) => {
  const fx = await notificationFixture(4, ["bob", ...USERS]);
  const gate = new Gate("notifications.consumer.afterLock");
  // One teardown, in this order: the parked batch is let go before the pool is closed (closing
  // waits for every connection, the parked batch's too), whatever failed before.
  t.after(async () => {
    gate.release();
    await fx.close();
  });
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  for (const u of USERS.slice(0, 6)) await ledger.likes.like(u, post.postId);
  await drainAll(ledger);
  for (const u of USERS.slice(6)) await ledger.likes.like(u, post.postId);
  for (const u of USERS.slice(0, 3)) await ledger.relations.follow(u, "bob");

  const off = ledger.hooks.on("notifications.consumer.afterLock", gate.handler);
  const consuming = ledger.notifications.consumer("likes").drain();
  consuming.catch(() => undefined);
  const parked = await gate.waitArrived();
  off();
  const rebuilding = ledger.notificationRebuild.rebuild({ recipients: ["bob"] });
  rebuilding.catch(() => undefined);
  const seen = await waitsOrFinishes(db.pool, rebuilding);
  assert.ok(
    "waits" in seen,
    "the rebuild installed bob's notifications while a consumer batch held bob's recipient lock: the install (or the consumer batch) does not take the recipients' locks",
  );
  const wait = seen.waits;
  t.diagnostic(
    `note rebuild install waits: ${wait.locktype} class ${wait.classid} (batch of partition ${String(parked.part)} holds bob)`,
  );
  assert.equal(wait.locktype, "advisory", "the rebuild waits on an advisory lock");
  assert.equal(wait.classid, RECIPIENT_LOCK_SPACE, "the recipient lock space");
  gate.release();
  await consuming;
  const report = await rebuilding;
  t.diagnostic(`note rebuild beside the parked batch: drifted ${report.rowsDrifted}, pending ${report.rowsPending}`);
  assert.equal(
    report.rowsDrifted,
    0,
    "the install saw the parked batch's rows; what it installed ahead of the consumer was pending, not drift",
  );
  assert.ok(report.rowsPending > 0, "events of later batches were still pending at the install");
  await drainAll(ledger);
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  const like = (await listNotificationGroups(db.pool, "bob")).groups.find((g) => g.type === "like")!;
  assert.equal(like.notificationsCount, 12);
});

test("the service's consumer loops (createWorkers) keep notifications up with live writes in the background: a bounded poll sees lag 0 and a view equal to the facts", async (t) => {
  const fx = await notificationFixture(4, ["bob", ...USERS]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const workers = createWorkers(ledger, { idleMs: 10, loops: 2 });
  assert.ok(
    workers.some((w) => w.name.startsWith("notifications#")),
    "createWorkers runs a notification loop",
  );
  for (const w of workers) w.start();
  t.after(() => Promise.all(workers.map((w) => w.stop())));
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  for (const [i, u] of USERS.entries()) {
    await ledger.likes.like(u, post.postId);
    if (i % 2 === 0) await ledger.relations.follow(u, "bob");
    if (i % 3 === 0) await ledger.comments.create(u, post.postId, `hi ${i}`);
    if (i % 4 === 0) await ledger.likes.unlike(u, post.postId);
  }
  const audit = await pollUntil(
    "notification lag 0",
    () => auditNotifications(db.pool),
    (a) => a.lag === 0,
  );
  assert.ok(notificationAuditClean(audit), JSON.stringify(audit));
  assert.deepEqual(await viewRows(db.pool), await factRows(db.pool));
  const shape = (await listNotificationGroups(db.pool, "bob")).groups.map((g) => `${g.type}:${g.notificationsCount}`);
  t.diagnostic(`note bob: ${shape.join(" ")}`);
  assert.deepEqual(
    shape.filter((s) => !s.startsWith("comment")),
    ["like:9", "follow:6"],
  );
  assert.equal(shape.filter((s) => s.startsWith("comment")).length, 4);
});

test("negative control: an install from a stale snapshot that overwrites (no version compare, newer rows not kept) undoes consumed events for good; the real install from the same snapshot undoes nothing", async (t) => {
  const fx = await notificationFixture(4, ["bob", ...USERS]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  for (const u of USERS.slice(0, 6)) await ledger.likes.like(u, post.postId);
  for (const u of USERS.slice(0, 3)) await ledger.relations.follow(u, "bob");
  await drainAll(ledger);
  const staleTruth = await readTruthRows(db.pool, ["bob"]);
  const staleSeqs = await readSnapshotSeqs(db.pool);
  // Live traffic after that snapshot, consumed before the install.
  for (const u of USERS.slice(6, 10)) await ledger.likes.like(u, post.postId);
  await ledger.likes.unlike(USERS[0]!, post.postId);
  await ledger.relations.follow(USERS[3]!, "bob");
  await ledger.relations.unfollow(USERS[1]!, "bob");
  await drainAll(ledger);
  const exact = await viewRowsWithIds(db.pool);

  const real = await ledger.notificationRebuild.installRecipient("bob", staleTruth, staleSeqs);
  t.diagnostic(`note the real install: ${JSON.stringify(real)}`);
  assert.deepEqual(
    [real.rowsDrifted, real.rowsPending, real.rowsNewer],
    [0, 0, 7],
    "the 7 pairs the consumer wrote after the snapshot are left alone",
  );
  assert.deepEqual(await viewRowsWithIds(db.pool), exact);
  assert.ok(notificationAuditClean(await auditNotifications(db.pool)));

  await installOverwrite(db.pool, "bob", staleTruth);
  await drainAll(ledger);
  const audit = await auditNotifications(db.pool);
  t.diagnostic(`note after the overwriting install and a drain: ${JSON.stringify(audit)}`);
  assert.deepEqual(
    [audit.extra, audit.missing, audit.lag],
    [2, 5, 0],
    "u-00's like and u-01's follow are back, 4 likes and a follow are lost, and no event is left to repair them",
  );
  assert.notDeepEqual(await viewRows(db.pool), await factRows(db.pool));
});
