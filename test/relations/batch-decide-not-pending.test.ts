/**
 * relation_set_batch refuses a decision (approve or reject) on a follow that is ACTIVE, as
 * relation_decide does: REJECTED NOT_PENDING, the row and its version unchanged, no event. Sent
 * as a batch of several writes straight to the function (a batch of one goes to the single
 * function, so only a larger batch reaches this rule). Also a follow made ACTIVE earlier in the
 * same batch: the decision after it sees the state the earlier write left. Beside them, in the
 * same batch, a decision on a PENDING request is applied: the batch does decide, it refuses
 * only what is not PENDING.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { acct, relationsFixture } from "./fixture.ts";

interface Write {
  op: "follow" | "unfollow" | "decide";
  /** follow/unfollow: a = follower, b = followee; decide: a = followee, b = follower. */
  a: string;
  b: string;
  approve?: boolean;
}

interface Row {
  outcome: string;
  state: string;
  version: string;
  seq: string;
  reason: string;
  code: string | null;
}

async function batch(pool: Pool, writes: readonly Write[]): Promise<string[]> {
  const { rows } = await pool.query<Row>(
    "SELECT outcome, state, version, seq, reason, code FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer) ORDER BY ord",
    [writes.map((w) => w.op), writes.map((w) => w.a), writes.map((w) => w.b), writes.map((w) => w.approve ?? null), 1],
  );
  return rows.map((r) => `${r.outcome}${r.code ? `:${r.code}` : ""} ${r.state} v${r.version} (${r.reason})`);
}

async function pairRows(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT follower || '>' || followee || ' ' || state || ' v' || version AS r FROM relation ORDER BY 1",
  );
  return rows.map((x) => x.r);
}

test("a batch of several writes refuses approve and reject on ACTIVE follows (NOT_PENDING, nothing written) and applies the decision on a PENDING request beside them", async (t) => {
  // 1 is private (its followers' requests are PENDING); 2 and 3 follow 1 and were approved; 4 asks.
  const f = await relationsFixture(1, 8, [1]);
  t.after(() => f.close());
  for (const follower of [acct(2), acct(3), acct(4)])
    assert.equal((await f.rel.follow(follower, acct(1))).state, "PENDING");
  for (const follower of [acct(2), acct(3)])
    assert.equal((await f.rel.decide(acct(1), follower, true)).state, "ACTIVE");
  const before = await pairRows(f.db.pool);
  const eventsBefore = Number(
    (await f.db.pool.query<{ n: string }>("SELECT count(*) AS n FROM relation_event")).rows[0]!.n,
  );

  const answers = await batch(f.db.pool, [
    { op: "decide", a: acct(1), b: acct(2), approve: true },
    { op: "decide", a: acct(1), b: acct(3), approve: false },
    { op: "decide", a: acct(1), b: acct(4), approve: true },
    // A public account's follower is ACTIVE at once; a decision later in the same batch sees that.
    { op: "follow", a: acct(5), b: acct(6) },
    { op: "decide", a: acct(6), b: acct(5), approve: false },
  ]);
  assert.deepEqual(answers, [
    // A refusal answers the pair's state as it stands: ACTIVE, at the version the approval gave it.
    "REJECTED:NOT_PENDING ACTIVE v2 (not PENDING (ACTIVE))",
    "REJECTED:NOT_PENDING ACTIVE v2 (not PENDING (ACTIVE))",
    "CHANGED ACTIVE v2 (PENDING->ACTIVE)",
    "CHANGED ACTIVE v1 (REMOVED->ACTIVE)",
    "REJECTED:NOT_PENDING ACTIVE v1 (not PENDING (ACTIVE))",
  ]);
  const after = await pairRows(f.db.pool);
  assert.deepEqual(
    after.filter((r) => r.startsWith(`${acct(2)}>`) || r.startsWith(`${acct(3)}>`)),
    before.filter((r) => r.startsWith(`${acct(2)}>`) || r.startsWith(`${acct(3)}>`)),
    "the ACTIVE follows and their versions are unchanged",
  );
  assert.ok(after.includes(`${acct(5)}>${acct(6)} ACTIVE v1`), "the follow made in the batch stays ACTIVE");
  const events = Number((await f.db.pool.query<{ n: string }>("SELECT count(*) AS n FROM relation_event")).rows[0]!.n);
  assert.equal(events - eventsBefore, 2, "one event per CHANGED: the approval and the new follow");
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});
