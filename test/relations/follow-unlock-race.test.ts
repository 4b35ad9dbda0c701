/**
 * A follow request racing the unlock of the private account it is sent to ends ACTIVE: the
 * request share-locks the account row (relation_set_batch's SELECT ... FOR SHARE), so an unlock that
 * starts while the request is uncommitted waits for it, then sees the PENDING row and approves
 * it. The request, a batch of one as the service sends a lone follow, is parked inside
 * relation_set_batch itself (relation.afterEvent), so this races the function production runs. The negative control is that function with only
 * its FOR SHARE removed, in this test's database: the unlock does not wait, finds no request to
 * approve (the row is not committed), and the request is left PENDING towards a public account.
 * The request is a repeated one (the pair's row exists, REMOVED): a pair's first follow inserts
 * its row, whose foreign key check key-share-locks the account row, and that lock alone would
 * make the unlock wait, with or without FOR SHARE.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { acct, relationsFixture } from "./fixture.ts";

async function race(t: TestContext, partitions: number, withoutShareLock: boolean) {
  const fan = acct(1);
  const star = acct(2);
  const f = await relationsFixture(partitions, 10, [2]);
  t.after(() => f.close());
  if (withoutShareLock) {
    // The single follow is a batch of one: the rule is relation_set_batch's.
    await replaceFunctionText(f.db.pool, "relation_set_batch(text[],text[],text[],boolean[],integer)", [
      [
        " FROM account a WHERE a.account_id = v_followee[i] FOR SHARE;",
        " FROM account a WHERE a.account_id = v_followee[i];",
      ],
    ]);
  }
  assert.equal((await f.rel.follow(fan, star)).state, "PENDING");
  assert.equal((await f.rel.unfollow(fan, star)).state, "REMOVED", "a withdrawn request: the pair's row exists");
  const hook = await SqlHook.arm(f.db.pool, "relation.afterEvent");
  try {
    const request = f.rel.follow(fan, star);
    const parked = await hook.parked();
    assert.deepEqual(
      [parked.context.follower, parked.context.followee, parked.context.state],
      [fan, star, "PENDING"],
      "the request is written, not committed",
    );
    const unlock = f.rel.upsertAccount(star, { private: false });
    const waiting = waitForAnyLockWait(f.db.pool, 5_000).then((w) => `the unlock waits (${w.locktype} ${w.mode})`);
    waiting.catch(() => undefined);
    const first = await Promise.race([
      unlock.then((u) => `the unlock committed first, approving ${u.approvedRequests}`),
      waiting,
    ]);
    await hook.release();
    const requested = await request;
    const unlocked = await unlock;
    const { rows } = await f.db.pool.query<{ state: string }>(
      "SELECT state FROM relation WHERE follower = $1 AND followee = $2",
      [fan, star],
    );
    t.diagnostic(
      `note ${withoutShareLock ? "without FOR SHARE" : "relation_set_batch as migrated"}: ${first}; request ${requested.outcome} ${requested.state}; unlock approved ${unlocked.approvedRequests}; final ${rows[0]!.state}`,
    );
    return {
      first,
      final: rows[0]!.state,
      approved: unlocked.approvedRequests,
      audit: await auditRelations(f.db.pool),
    };
  } finally {
    await hook.release();
  }
}

for (const partitions of [1, 4]) {
  test(`P=${partitions} a follow request (a batch of one) parked inside relation_set_batch while its account is unlocked: the unlock waits for its share lock, approves it, and it ends ACTIVE`, async (t) => {
    const r = await race(t, partitions, false);
    assert.match(r.first, /^the unlock waits/);
    assert.equal(r.approved, 1);
    assert.equal(r.final, "ACTIVE");
    assert.ok(relationAuditClean(r.audit), JSON.stringify(r.audit));
  });
}

test("P=1 negative control: relation_set_batch without FOR SHARE, a lone follow, leaves the request PENDING towards an account that is public", async (t) => {
  const r = await race(t, 1, true);
  assert.match(r.first, /^the unlock committed first, approving 0/);
  assert.equal(r.final, "PENDING");
});
