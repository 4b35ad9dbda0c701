import { test } from "node:test";
import assert from "node:assert/strict";
import { formatRelationResult as fmt } from "../../src/relations/types.ts";
import { followerCount } from "../../src/relations/relation-reads.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { acct, relationsFixture, scalar } from "./fixture.ts";

for (const partitions of [1, 4]) {
  test(`30-A P=${partitions} follow a public account, request and approve a private one; PENDING is not counted`, async (t) => {
    const f = await relationsFixture(partitions, 10, [2]);
    t.after(() => f.close());
    const pub = await f.rel.follow(acct(3), acct(1));
    const req = await f.rel.follow(acct(3), acct(2));
    t.diagnostic(`note follow public: ${fmt(pub)} follow private: ${fmt(req)}`);
    assert.deepEqual([pub.outcome, pub.state, pub.version], ["CHANGED", "ACTIVE", 1]);
    assert.deepEqual([req.outcome, req.state, req.version], ["CHANGED", "PENDING", 1]);
    await f.projector.drain();
    assert.equal((await followerCount(f.db.pool, acct(1), 0)).count, 1);
    assert.equal((await followerCount(f.db.pool, acct(2), 0)).count, 0, "a PENDING request is not a follower");

    const approved = await f.rel.decide(acct(2), acct(3), true);
    t.diagnostic(`note approve: ${fmt(approved)}`);
    assert.deepEqual([approved.outcome, approved.state, approved.version], ["CHANGED", "ACTIVE", 2]);
    const again = await f.rel.decide(acct(2), acct(3), true);
    assert.equal(again.outcome, "REJECTED", "deciding a request that is no longer PENDING");
    assert.equal(again.code, "NOT_PENDING");
    await f.projector.drain();
    assert.deepEqual(await followerCount(f.db.pool, acct(2), 0), { count: 1, lag: 0, stale: false });
    assert.deepEqual(await f.rel.relationship(acct(3), acct(2)), {
      following: true,
      requested: false,
      followedBy: false,
      requestedBy: false,
      blocking: false,
      blockedBy: false,
    });
    assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
  });
}

test("30-B P=1 a second request to a private account is NOOP(PENDING,v1,already PENDING); reject removes", async (t) => {
  const f = await relationsFixture(1, 10, [2]);
  t.after(() => f.close());
  await f.rel.follow(acct(4), acct(2));
  const second = await f.rel.follow(acct(4), acct(2));
  t.diagnostic(`note second request: ${fmt(second)}`);
  assert.equal(fmt(second), "NOOP(PENDING,v1,already PENDING)");
  assert.equal(await scalar(f, "SELECT count(*) AS n FROM relation_event"), 1);
  assert.deepEqual(await f.rel.relationship(acct(4), acct(2)), {
    following: false,
    requested: true,
    followedBy: false,
    requestedBy: false,
    blocking: false,
    blockedBy: false,
  });
  const rejected = await f.rel.decide(acct(2), acct(4), false);
  assert.deepEqual([rejected.outcome, rejected.state, rejected.version], ["CHANGED", "REMOVED", 2]);
});

test("30-C P=1 self-follow rejected, empty unfollow NOOP, versions only grow, unblock does not restore", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  const self = await f.rel.follow(acct(5), acct(5));
  t.diagnostic(`note self-follow: ${fmt(self)} code=${self.code}`);
  assert.equal(self.outcome, "REJECTED");
  assert.equal(self.code, "SELF_FOLLOW");
  const selfBlock = await f.rel.block(acct(5), acct(5));
  assert.equal(selfBlock.outcome, "REJECTED");
  assert.equal(selfBlock.code, "SELF_BLOCK");

  const empty = await f.rel.unfollow(acct(5), acct(6));
  t.diagnostic(`note empty unfollow: ${fmt(empty)}`);
  assert.equal(fmt(empty), "NOOP(REMOVED,v0,already REMOVED)");
  assert.equal(await scalar(f, "SELECT count(*) AS n FROM relation_event"), 0);

  await f.rel.follow(acct(5), acct(6));
  await f.rel.unfollow(acct(5), acct(6));
  const third = await f.rel.follow(acct(5), acct(6));
  t.diagnostic(`note follow, unfollow, follow: ${fmt(third)}`);
  assert.equal(fmt(third), "CHANGED(ACTIVE,v3,seq3)");

  await f.rel.follow(acct(6), acct(5));
  const block = await f.rel.block(acct(6), acct(5));
  assert.equal(block.outcome, "CHANGED");
  assert.deepEqual(await f.rel.relationship(acct(5), acct(6)), {
    following: false,
    requested: false,
    followedBy: false,
    requestedBy: false,
    blocking: false,
    blockedBy: true,
  });
  const blockedFollow = await f.rel.follow(acct(5), acct(6));
  assert.equal(blockedFollow.outcome, "REJECTED");
  assert.equal(blockedFollow.code, "BLOCKED");
  assert.equal((await f.rel.block(acct(6), acct(5))).outcome, "NOOP", "already blocked and both REMOVED");

  const unblock = await f.rel.unblock(acct(6), acct(5));
  t.diagnostic(`note unblock: ${fmt(unblock)}`);
  assert.equal(unblock.outcome, "CHANGED");
  assert.equal((await f.rel.unblock(acct(6), acct(5))).outcome, "NOOP");
  const rows = await f.db.pool.query("SELECT follower, state FROM relation WHERE state <> 'REMOVED'");
  assert.equal(rows.rowCount, 0, "unblock restores nothing");
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});
