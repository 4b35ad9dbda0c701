/**
 * The relation erasure guard in relation_set_batch: its own UPDATEs skip the
 * per-row trigger (ledger.relation_guarded) and ask its question themselves, right before each
 * UPDATE. An erasure that starts after the batch's first check (the batch parked at
 * follow.afterLock, its pairs locked) still refuses the pair's write: a REJECTED row with
 * ACCOUNT_BEING_ERASED, the row not written, the batch's other pair written. Negative control: the
 * function without that re-check writes the follow of the account being erased. And the trigger
 * still guards every other UPDATE of relation, unless ledger.relation_guarded is on.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { acct, relationsFixture, scalar, type RelationsFixture } from "./fixture.ts";

interface Row {
  ord: number;
  outcome: string;
  code: string | null;
  account: string | null;
}

/**
 * acct(1) -> acct(2) exists (followed, then unfollowed: REMOVED v2, so the batch's follow takes
 * no foreign-key lock on acct(1)'s account row); a batch follows it and acct(3) -> acct(4), parks
 * at follow.afterLock of its first write, and acct(1)'s erasure starts and commits meanwhile.
 */
async function followWhileErasureStarts(f: RelationsFixture): Promise<{ rows: Row[]; state: string; events: number }> {
  await f.rel.follow(acct(1), acct(2));
  await f.rel.unfollow(acct(1), acct(2));
  const events0 = await scalar(f, "SELECT count(*)::int AS n FROM relation_event");
  const hook = await SqlHook.arm(f.db.pool, "follow.afterLock");
  let rows: Row[];
  try {
    const batch = batchFollows(f.db.pool, [
      [acct(1), acct(2)],
      [acct(3), acct(4)],
    ]);
    const parked = await hook.parked();
    assert.equal(parked.context.follower, acct(1));
    assert.equal(
      (await f.db.pool.query<{ s: string }>("SELECT erasure_start($1, 'admin') AS s", [acct(1)])).rows[0]!.s,
      "STARTED",
    );
    await hook.release();
    rows = await batch;
  } finally {
    await hook.release();
  }
  const {
    rows: [pair],
  } = await f.db.pool.query<{ state: string }>("SELECT state FROM relation WHERE follower = $1 AND followee = $2", [
    acct(1),
    acct(2),
  ]);
  return {
    rows,
    state: pair!.state,
    events: (await scalar(f, "SELECT count(*)::int AS n FROM relation_event")) - events0,
  };
}

async function batchFollows(pool: Pool, pairs: [string, string][]): Promise<Row[]> {
  const { rows } = await pool.query<Row>(
    "SELECT ord, outcome, code, account FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], 1) ORDER BY ord",
    [pairs.map(() => "follow"), pairs.map((p) => p[0]), pairs.map((p) => p[1]), pairs.map(() => null)],
  );
  return rows;
}

const show = (r: Row) => `${r.outcome}${r.code ? `:${r.code}` : ""}${r.account ? `(${r.account})` : ""}`;

test("an erasure that starts while a batch holds its pairs' locks refuses that pair's write at the batch's own re-check (REJECTED ACCOUNT_BEING_ERASED, row not written), the other pair is written", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  const r = await followWhileErasureStarts(f);
  assert.deepEqual(r.rows.map(show), [`REJECTED:ACCOUNT_BEING_ERASED(${acct(1)})`, "CHANGED"]);
  assert.equal(r.state, "REMOVED");
  assert.equal(r.events, 1);
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});

test("negative control: relation_set_batch without the re-check (the trigger skipped all the same) writes the follow of the account being erased", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "relation_set_batch(text[],text[],text[],boolean[],integer)", [
    ["IF FOUND AND v_hit.erased_state = 'ERASING' THEN", "IF false THEN"],
  ]);
  const r = await followWhileErasureStarts(f);
  t.diagnostic(`note mutant: ${r.rows.map(show).join(", ")}, pair ${r.state}`);
  assert.deepEqual(r.rows.map(show), ["CHANGED", "CHANGED"]);
  assert.equal(r.state, "ACTIVE");
});

test("the UPDATE guard (AFTER UPDATE) still refuses any other UPDATE of a relation row of an account being erased, and is skipped only with ledger.relation_guarded on", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  await f.rel.follow(acct(5), acct(6));
  await f.db.pool.query("SELECT erasure_start($1, 'admin')", [acct(6)]);
  const update = "UPDATE relation SET changed_at = now() WHERE follower = $1 AND followee = $2";
  await assert.rejects(f.db.pool.query(update, [acct(5), acct(6)]), { name: "AccountBeingErasedError" });
  const client = await f.db.pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("SELECT set_config('ledger.relation_guarded', 'on', true)");
    const { rowCount } = await client.query(update, [acct(5), acct(6)]);
    assert.equal(rowCount, 1, "the trigger's WHEN skips it");
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
  const { rows } = await f.db.pool.query<{ tgname: string; timing: string }>(
    `SELECT tgname, CASE WHEN tgtype & 2 = 2 THEN 'BEFORE' ELSE 'AFTER' END AS timing FROM pg_trigger
      WHERE tgrelid = 'relation'::regclass AND tgname LIKE 'relation_erasure_guard%' ORDER BY tgname`,
  );
  assert.deepEqual(
    rows.map((r) => `${r.tgname} ${r.timing}`),
    ["relation_erasure_guard BEFORE", "relation_erasure_guard_update AFTER"],
  );
});
