/**
 * A reconciliation records a kind's reconciled boundary only when every target whose install
 * failed was dropped (its next read backfills it). A failed target that could not be dropped
 * keeps the boundary where it was, so the next run visits that target again. Real Redis: the
 * reconciler connects as an ACL user that may not DEL, except (a selector) the keys of targets
 * named drop-*; two targets' logs are made malformed so their installs fail. Cases: only a
 * target that cannot be dropped fails (boundary stays; the next run visits it again, drops it
 * and advances); one that can and one that cannot (boundary stays); only one that can (the
 * control: with this very user the boundary does advance, so a boundary that stays is the rule's
 * doing, not the user's).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { reconciledKey } from "../../src/cache/count-keys.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { connectRedis } from "../../src/cache/redis-connection.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

const BUCKETS = 4;

async function lab(t: TestContext) {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start();
  const admin = await connectRedis(server.url);
  // May do everything but DEL (and UNLINK), except on the keys of targets named drop-*.
  await admin.sendCommand([
    "ACL",
    "SETUSER",
    "reconciler",
    "on",
    ">reconciler-secret",
    "~*",
    "&*",
    "+@all",
    "-del",
    "-unlink",
    "(~*drop-* +del)",
  ]);
  const restricted = await connectRedis(`redis://reconciler:reconciler-secret@127.0.0.1:${server.port}`);
  t.after(async () => {
    await restricted.close().catch(() => {});
    await admin.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(admin, BUCKETS);
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS);
  await feeder.pollOnce();
  const reader = new CountReader(db.pool, store, { localTtlMs: 0 });
  const boundary = () => admin.hGetAll(reconciledKey("likes"));
  const present = async () =>
    Object.fromEntries(
      (await db.pool.query<{ part: number; last: number }>(LIKE_COUNTS.positionsSql)).rows.map((p) => [
        String(p.part),
        String(p.last),
      ]),
    );
  return {
    db,
    admin,
    likes,
    store,
    feeder,
    reader,
    boundary,
    present,
    restrictedStore: new CountStore(restricted, BUCKETS),
  };
}

type Lab = Awaited<ReturnType<typeof lab>>;

/**
 * Items good-0, good-1 and `bad` (each backfilled, then reconciled once so the boundary starts
 * after the backfills); then each bad item's log gets an entry that is not `<part>:<seq>` (its
 * install fails), every item is liked again and fed. Returns the boundary at that point.
 */
async function prepare(l: Lab, bad: readonly string[]): Promise<Record<string, string>> {
  const items = ["good-0", "good-1", ...bad];
  for (const item of items) {
    await l.likes.createItem(item);
    await l.likes.like("u0", item);
    assert.equal((await l.reader.read(LIKE_COUNTS, item, { allowedLag: 0 })).count, 1, `backfill of ${item}`);
  }
  await new Reconciler(l.db.pool, l.store).reconcile(LIKE_COUNTS);
  for (const item of bad) await l.admin.sendCommand(["HSET", l.store.logKey("likes", item), "garbage", "1"]);
  for (const item of items) await l.likes.like("u1", item);
  while ((await l.feeder.pollOnce()) > 0);
  const before = await l.boundary();
  assert.notDeepEqual(before, await l.present(), "there is something to reconcile: the boundary is behind the present");
  return before;
}

const failed = (r: { failed: { target: string; dropped: boolean }[] }) => r.failed.map((f) => [f.target, f.dropped]);

test("a failed target that could not be dropped keeps the reconciled boundary; the next run visits it again, drops it and advances", async (t) => {
  const l = await lab(t);
  const before = await prepare(l, ["stuck-bad"]);
  const report = await new Reconciler(l.db.pool, l.restrictedStore).reconcile(LIKE_COUNTS);
  assert.deepEqual(failed(report), [["stuck-bad", false]]);
  assert.equal(report.installed, 2, "the good targets were installed");
  assert.deepEqual(await l.boundary(), before, "a failure that was not dropped must not be recorded over");
  const again = await new Reconciler(l.db.pool, l.store).reconcile(LIKE_COUNTS);
  assert.ok(
    again.visited >= 1 && again.failed.some((f) => f.target === "stuck-bad"),
    `the next run visits stuck-bad again: ${JSON.stringify(again)}`,
  );
  assert.deepEqual(failed(again), [["stuck-bad", true]]);
  assert.deepEqual(await l.boundary(), await l.present(), "dropped now: the boundary advances");
});

test("one failed target dropped and one not: the boundary stays", async (t) => {
  const l = await lab(t);
  const before = await prepare(l, ["drop-bad", "stuck-bad"]);
  const report = await new Reconciler(l.db.pool, l.restrictedStore).reconcile(LIKE_COUNTS);
  assert.deepEqual(failed(report), [
    ["drop-bad", true],
    ["stuck-bad", false],
  ]);
  assert.deepEqual(await l.boundary(), before, "every failed target must have been dropped for the boundary to move");
});

test("control: with the same restricted user, a run whose only failed target was dropped advances the boundary to the present", async (t) => {
  const l = await lab(t);
  await prepare(l, ["drop-bad"]);
  const report = await new Reconciler(l.db.pool, l.restrictedStore).reconcile(LIKE_COUNTS);
  assert.deepEqual(failed(report), [["drop-bad", true]]);
  assert.deepEqual(await l.boundary(), await l.present());
});
