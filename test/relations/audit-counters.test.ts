import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { auditRelations, type RelationAudit } from "../../src/relations/relation-audit.ts";
import { stablePartition } from "../../src/partition.ts";
import { acct, relationsFixture, type RelationsFixture } from "./fixture.ts";

/**
 * Each counter of the chapter-30 audit (RELATION_INVARIANTS in src/relations/relation-audit.ts),
 * which gates most relations tests, seen to fire: a healthy graph audits clean, then one
 * corruption written with direct SQL makes exactly that counter count it, and the others
 * stay 0. A regression that makes a counter return 0 fails here.
 */

const PARTITIONS = 4;
const PRIVATE = 4;
const CLEAN: RelationAudit = {
  invalidRows: 0,
  versionMismatchPairs: 0,
  blockedButNotRemoved: 0,
  illegalTransitions: 0,
  sequenceViolations: 0,
};

/**
 * P = 4. 1 follows 2 (ACTIVE v1); 3 requests 4, which is private, and 4 approves (PENDING v1,
 * ACTIVE v2); 5 follows and unfollows 6 (ACTIVE v1, REMOVED v2); 7 follows 8 (ACTIVE v1).
 */
async function healthyGraph(t: TestContext): Promise<RelationsFixture> {
  const f = await relationsFixture(PARTITIONS, 20, [PRIVATE]);
  t.after(() => f.close());
  await f.rel.follow(acct(1), acct(2));
  await f.rel.follow(acct(3), acct(PRIVATE));
  await f.rel.decide(acct(PRIVATE), acct(3), true);
  await f.rel.follow(acct(5), acct(6));
  await f.rel.unfollow(acct(5), acct(6));
  await f.rel.follow(acct(7), acct(8));
  assert.deepEqual(await auditRelations(f.db.pool), CLEAN);
  return f;
}

test("audit invalidRows: a self-follow row and a row in an unknown state are two invalid rows", async (t) => {
  // The table's own CHECKs refuse both rows; the audit is what still sees them if a CHECK is lost.
  const f = await healthyGraph(t);
  await f.db.pool.query("ALTER TABLE relation DROP CONSTRAINT relation_check");
  await f.db.pool.query("INSERT INTO relation (follower, followee, state, version) VALUES ($1, $1, 'REMOVED', 0)", [
    acct(9),
  ]);
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, invalidRows: 1 });
  await f.db.pool.query("ALTER TABLE relation DROP CONSTRAINT relation_state_check");
  await f.db.pool.query("INSERT INTO relation (follower, followee, state, version) VALUES ($1, $2, 'FROZEN', 0)", [
    acct(9),
    acct(10),
  ]);
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, invalidRows: 2 });
});

test("audit versionMismatchPairs: a relation row whose version is one more than its events is one mismatched pair", async (t) => {
  const f = await healthyGraph(t);
  await f.db.pool.query("UPDATE relation SET version = version + 1 WHERE follower = $1 AND followee = $2", [
    acct(1),
    acct(2),
  ]);
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, versionMismatchPairs: 1 });
});

test("audit blockedButNotRemoved: a block row next to an ACTIVE follow is one violation", async (t) => {
  const f = await healthyGraph(t);
  await f.db.pool.query("INSERT INTO block (blocker, blocked) VALUES ($1, $2)", [acct(2), acct(1)]);
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, blockedButNotRemoved: 1 });
});

test("audit illegalTransitions: a pair's events rewritten to ACTIVE then ACTIVE are one illegal transition", async (t) => {
  // The newest event (v2 ACTIVE) still matches the row, so only the v1 -> v2 step is wrong.
  const f = await healthyGraph(t);
  await f.db.pool.query(
    "UPDATE relation_event SET state = 'ACTIVE' WHERE follower = $1 AND followee = $2 AND version = 1",
    [acct(3), acct(PRIVATE)],
  );
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, illegalTransitions: 1 });
});

test("audit sequenceViolations: a partition's last seq ahead of its events, then an event in the wrong partition", async (t) => {
  const f = await healthyGraph(t);
  await f.db.pool.query("UPDATE event_seq SET last = last + 1 WHERE part = $1", [stablePartition(acct(2), PARTITIONS)]);
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, sequenceViolations: 1 });
  // 7 -> 8 has one event. Renaming the followee in the row and in the event keeps the pair
  // consistent, so only the placement rule (the followee's partition) is broken.
  const home = stablePartition(acct(8), PARTITIONS);
  const moved = [11, 12, 13, 14, 15].map(acct).find((a) => stablePartition(a, PARTITIONS) !== home)!;
  await f.db.pool.query(
    `WITH pair AS (UPDATE relation SET followee = $3 WHERE follower = $1 AND followee = $2)
     UPDATE relation_event SET followee = $3 WHERE follower = $1 AND followee = $2`,
    [acct(7), acct(8), moved],
  );
  assert.deepEqual(await auditRelations(f.db.pool), { ...CLEAN, sequenceViolations: 2 });
});
