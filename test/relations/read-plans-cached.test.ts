/**
 * The hot relation reads (a relationship, a follower count) are not planned on every
 * call. N reads of each on one connection, counted by pg_stat_statements (track_planning on):
 * `plans` stays at the plan cache's five custom trials plus the generic plan it keeps. The
 * negative control is the relationship read as it was (two unnamed statements, which the
 * extended protocol parses and plans on every call).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { RelationService } from "../../src/relations/relation-service.ts";
import { AccountNotFoundError } from "../../src/relations/errors.ts";
import { followerCount, missingAccounts, relationships } from "../../src/relations/relation-reads.ts";
import type { Pool } from "../../src/db/pool.ts";
import { startStatementStatsCluster, statementWith, type StatementStatsCluster } from "../support/statement-stats.ts";

const PARTITIONS = 4;
const ACCOUNTS = 200;
const N = 60;
const MAX_PLANS = 6;

let c: StatementStatsCluster;

test.before(async () => {
  c = await startStatementStatsCluster(PARTITIONS);
  await c.admin.query(
    "INSERT INTO account (account_id) SELECT 'acct-' || i FROM generate_series(0, $1::int - 1) AS i",
    [ACCOUNTS],
  );
  const relations = await RelationService.open(c.admin);
  // One popular account, and pairs of every kind the statement answers.
  for (let i = 1; i < 40; i++) await relations.follow(`acct-${i}`, "acct-0");
  await relations.follow("acct-0", "acct-1");
  await relations.block("acct-2", "acct-0");
  await c.admin.query("ANALYZE");
});

test.after(async () => {
  await c?.close();
});

/** N reads on a fresh one-connection reader pool (`open` runs before the count starts). */
async function countedReads(
  t: { diagnostic(m: string): void },
  fragment: string,
  open: (pool: Pool) => Promise<(k: number) => Promise<unknown>>,
): Promise<{ calls: number; plans: number }> {
  const pool = c.readerPool();
  const read = await open(pool);
  await c.reset();
  for (let k = 0; k < N; k++) await read(k);
  const s = statementWith(await c.readerStatements(), fragment);
  t.diagnostic(`note ${s.plans} plans in ${s.calls} calls`);
  return s;
}

test("relationship is one statement, planned at most six times in N calls on one connection, and answers as before", async (t) => {
  const s = await countedReads(t, "AS a_exists", async (pool) => {
    const service = await RelationService.open(pool);
    return (k) => service.relationship("acct-0", `acct-${k % ACCOUNTS}`);
  });
  assert.equal(s.calls, N);
  assert.ok(s.plans <= MAX_PLANS, `relationship: ${s.plans} plans in ${s.calls} calls`);
  assert.equal((await c.readerStatements()).length, 1, "one statement per relationship");
  const relations = await RelationService.open(c.admin);
  assert.deepEqual(await relations.relationship("acct-0", "acct-1"), {
    following: true,
    requested: false,
    followedBy: true,
    requestedBy: false,
    blocking: false,
    blockedBy: false,
  });
  assert.deepEqual(await relations.relationship("acct-0", "acct-2"), {
    following: false,
    requested: false,
    followedBy: false,
    requestedBy: false,
    blocking: false,
    blockedBy: true,
  });
  assert.deepEqual(await relations.relationship("acct-2", "acct-0"), {
    following: false,
    requested: false,
    followedBy: false,
    requestedBy: false,
    blocking: true,
    blockedBy: false,
  });
  // The same answers as the list read, for every kind of pair above.
  for (const other of ["acct-1", "acct-2", "acct-3", "acct-0"]) {
    const listed = (await relationships(c.admin, "acct-0", [other]))[0]!;
    assert.deepEqual({ ...(await relations.relationship("acct-0", other)), id: other }, listed, `acct-0 -> ${other}`);
  }
  await assert.rejects(
    relations.relationship("acct-0", "nobody"),
    (err) => err instanceof AccountNotFoundError && /nobody/.test(err.message) && !/acct-0/.test(err.message),
  );
  await assert.rejects(
    relations.relationship("ghost", "ghost"),
    (err) => err instanceof AccountNotFoundError && /ghost/.test(err.message),
  );
});

test("follower count is planned at most six times in N calls on one connection", async (t) => {
  const s = await countedReads(
    t,
    "FROM proj_count",
    async (pool) => (k) => followerCount(pool, `acct-${k % ACCOUNTS}`, 0),
  );
  assert.equal(s.calls, N);
  assert.ok(s.plans <= MAX_PLANS, `follower count: ${s.plans} plans in ${s.calls} calls`);
});

test("negative control: the relationship as two unnamed statements is planned on every call", async (t) => {
  const s = await countedReads(t, "FROM unnest", async (pool) => async (k) => {
    await missingAccounts(pool, ["acct-0", `acct-${k % ACCOUNTS}`]);
    return relationships(pool, "acct-0", [`acct-${k % ACCOUNTS}`]);
  });
  assert.equal(s.calls, N);
  assert.ok(s.plans >= N, `the list read for one pair: ${s.plans} plans in ${s.calls} calls`);
});
