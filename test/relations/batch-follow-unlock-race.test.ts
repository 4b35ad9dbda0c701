/**
 * The batched write path's version of follow-unlock-race.test.ts: a follow request sent through
 * relation_set_batch (a batch of several writes, so the batch function itself runs) and racing
 * the unlock of the private account it is sent to ends ACTIVE. The batch share-locks the
 * followee's account row when it finds it private (its SELECT ... FOR SHARE), so an unlock that
 * starts while the batch is uncommitted waits for it (pg_locks), then sees the PENDING row and
 * approves it. The batch is parked inside the function at relation.afterEvent (its events
 * written, every lock held). The negative control is relation_set_batch with only that FOR SHARE
 * removed, in this test's database: the unlock does not wait, approves nothing, and the request
 * is left PENDING towards a public account. The request is a repeated one (the pair's row exists,
 * REMOVED), so no foreign-key check of a new row key-share-locks the account row instead.
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
  const armed: { hook?: SqlHook } = {};
  // The parked batch is let go before the pool closes (closing waits for its connection).
  t.after(async () => {
    await armed.hook?.release();
    await f.close();
  });
  if (withoutShareLock) {
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
  armed.hook = hook;
  // The request first, then a follow of another pair, so the batch's first event (the one that parks) is the request.
  const request = f.db.pool.query<{ outcome: string; state: string }>(
    "SELECT outcome, state FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer) ORDER BY ord",
    [["follow", "follow"], [fan, acct(3)], [star, acct(4)], [null, null], partitions],
  );
  request.catch(() => undefined);
  const parked = await hook.parked();
  assert.deepEqual(
    [parked.context.follower, parked.context.followee, parked.context.state],
    [fan, star, "PENDING"],
    "the request is written, not committed",
  );
  const unlock = f.rel.upsertAccount(star, { private: false });
  unlock.catch(() => undefined);
  const waiting = waitForAnyLockWait(f.db.pool, 5_000).then((w) => `the unlock waits (${w.locktype} ${w.mode})`);
  waiting.catch(() => undefined);
  const first = await Promise.race([
    unlock.then((u) => `the unlock committed first, approving ${u.approvedRequests}`),
    waiting,
  ]);
  await hook.release();
  const answered = (await request).rows;
  const unlocked = await unlock;
  const { rows } = await f.db.pool.query<{ state: string }>(
    "SELECT state FROM relation WHERE follower = $1 AND followee = $2",
    [fan, star],
  );
  t.diagnostic(
    `note ${withoutShareLock ? "without FOR SHARE" : "relation_set_batch as migrated"}: ${first}; request ${answered[0]!.outcome} ${answered[0]!.state}; unlock approved ${unlocked.approvedRequests}; final ${rows[0]!.state}`,
  );
  return {
    first,
    request: answered[0]!,
    final: rows[0]!.state,
    approved: unlocked.approvedRequests,
    audit: await auditRelations(f.db.pool),
  };
}

for (const partitions of [1, 4]) {
  test(`P=${partitions} a follow request parked inside relation_set_batch while its account is unlocked: the unlock waits for the batch's share lock, approves it, and it ends ACTIVE`, async (t) => {
    const r = await race(t, partitions, false);
    assert.match(r.first, /^the unlock waits/);
    assert.deepEqual([r.request.outcome, r.request.state], ["CHANGED", "PENDING"]);
    assert.equal(r.approved, 1);
    assert.equal(r.final, "ACTIVE", "never PENDING towards a public account");
    assert.ok(relationAuditClean(r.audit), JSON.stringify(r.audit));
  });
}

test("P=1 negative control: relation_set_batch without FOR SHARE leaves the request PENDING towards an account that is public", async (t) => {
  const r = await race(t, 1, true);
  assert.match(r.first, /^the unlock committed first, approving 0/);
  assert.equal(r.final, "PENDING");
});
