import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { RebuildInProgressError } from "../../src/likes/like-rebuild.ts";
import { likesFixture, user } from "./fixture.ts";

test("32-rebuild one rebuild at a time: a second one is refused with REBUILD_IN_PROGRESS and writes nothing", async (t) => {
  const f = await likesFixture(2);
  const parked = new Gate("rebuild.afterSnapshot");
  t.after(async () => {
    parked.release();
    await f.close();
  });
  for (let u = 1; u <= 6; u++) await f.likes.like(user(u), "item-lab-01");
  const off = f.hooks.on("rebuild.afterSnapshot", parked.handler);
  const first = f.rebuild.rebuild();
  await parked.waitArrived();
  off();
  const runsBefore = await f.db.pool.query("SELECT count(*)::int AS n FROM like_rebuild_run");
  await assert.rejects(
    f.rebuild.rebuild(),
    (err: unknown) => err instanceof RebuildInProgressError && err.code === "REBUILD_IN_PROGRESS",
  );
  const runsAfter = await f.db.pool.query("SELECT count(*)::int AS n FROM like_rebuild_run");
  assert.deepEqual(runsAfter.rows, runsBefore.rows);
  parked.release();
  const report = await first;
  assert.equal(report.itemsChecked, 4);
  // Once the first has finished, the next one runs.
  assert.equal((await f.rebuild.rebuild()).drifted.length, 0);
});
