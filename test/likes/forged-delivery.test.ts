import { test } from "node:test";
import assert from "node:assert/strict";
import { InvalidInputError } from "../../src/errors.ts";
import { likesFixture, user } from "./fixture.ts";
import { acct, relationsFixture } from "../relations/fixture.ts";

async function derivedRows(pool: import("../../src/db/pool.ts").Pool): Promise<string> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*) FROM processed_event) AS processed, (SELECT coalesce(sum(n), 0) FROM like_count) AS n,
            (SELECT count(*) FROM proj_seen) AS seen, (SELECT count(*) FROM proj_follower) AS followers`,
  );
  return JSON.stringify(rows[0]);
}

test("32-bad-input a delivery that is not in the outbox, or differs from it, is refused and changes nothing", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await f.likes.like(user(1), "item-lab-01");
  const [real] = await f.consumer.fetchRange(0, 1, 1);
  const before = await derivedRows(f.db.pool);
  // One field changed per forgery, each to a value that names something real (another user,
  // another item, a later version), so that an unchecked field would apply a wrong event.
  for (const forged of [
    { ...real!, seq: 99 },
    { ...real!, delta: -1 as const },
    { ...real!, itemId: "item-lab-02" },
    { ...real!, userId: user(2) },
    { ...real!, version: real!.version + 1 },
  ]) {
    await assert.rejects(
      f.consumer.applyBatch([forged]),
      (err: unknown) => err instanceof InvalidInputError && err.field === "events",
    );
  }
  assert.equal(await derivedRows(f.db.pool), before);
  await assert.rejects(f.rebuild.rebuild({ items: null as unknown as string[] }), InvalidInputError);
  await assert.rejects(f.rebuild.rebuild({ items: "item-lab-01" as unknown as string[] }), InvalidInputError);
  // The real event still applies.
  assert.equal((await f.consumer.applyBatch([real!])).applied, 1);
});

test("30-bad-input a relation event that is not in relation_event, or differs from it, is refused", async (t) => {
  const f = await relationsFixture(1, 5);
  t.after(() => f.close());
  await f.rel.follow(acct(1), acct(2));
  const [real] = await f.projector.fetchRange(0, 1, 1);
  const before = await derivedRows(f.db.pool);
  for (const forged of [
    { ...real!, seq: 7 },
    { ...real!, state: "REMOVED" as const },
    { ...real!, version: 9 },
    { ...real!, follower: acct(3) },
    { ...real!, followee: acct(4) },
  ]) {
    await assert.rejects(
      f.projector.applyBatch([forged]),
      (err: unknown) => err instanceof InvalidInputError && err.field === "events",
    );
  }
  assert.equal(await derivedRows(f.db.pool), before);
  assert.equal((await f.projector.applyBatch([real!])).applied, 1);
});
