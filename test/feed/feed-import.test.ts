import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { importFacts } from "../../src/portability/import.ts";
import { drainFeed, expectedRows, feedClean, feedFixture, inboxRows } from "./fixture.ts";

const lines = (rows: object[]) => Readable.from([rows.map((r) => JSON.stringify(r)).join("\n") + "\n"]);

test("imported follows (set-based, without events) leave every inbox equal to the truth, and imported blocks take posts out", async (t) => {
  const fx = await feedFixture(2, ["ann", "bob", "cat"]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  await ledger.relations.follow("cat", "ann");
  await ledger.posts.createPost("bob", "PUBLIC", "bob");
  await ledger.posts.createPost("cat", "FOLLOWERS", "cat");
  await ledger.posts.createPost("ann", "PUBLIC", "ann");
  await drainFeed(ledger);
  await importFacts(
    db.pool,
    lines([
      { kind: "follow", follower: "ann", followee: "bob", state: "ACTIVE" },
      { kind: "follow", follower: "ann", followee: "cat", state: "ACTIVE" },
      { kind: "block", blocker: "ann", blocked: "cat" },
    ]),
  );
  await drainFeed(ledger);
  assert.deepEqual(await inboxRows(db.pool), await expectedRows(db.pool, 800));
  assert.equal((await inboxRows(db.pool)).filter((r) => r.startsWith("ann ")).length, 2, "ann's own post and bob's");
  assert.ok(await feedClean(ledger));
});
