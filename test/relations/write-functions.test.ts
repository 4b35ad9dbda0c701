/**
 * Relation writes as server-side functions (relation_follow, ..., src/db/schema.sql): one statement per write; the
 * same outcome and the same rows with the SQL hook points on (as in every test database) and off
 * (as in production), so the race tests' path is production's; and the invariants under
 * concurrent writers.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { transactionStats } from "../../src/db/transaction.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import type { RelationResult } from "../../src/relations/types.ts";
import { formatRelationResult } from "../../src/relations/types.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { acct, relationsFixture, type RelationsFixture } from "./fixture.ts";

/** Counts the statements every pg client of this process sends while it is on; the test sends nothing else meanwhile. */
function countStatements(): { readonly n: number; stop(): void } {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  const counter = { n: 0, stop: () => void (prototype.query = original) };
  prototype.query = function (this: unknown, ...args: unknown[]) {
    counter.n++;
    return original.apply(this, args);
  };
  return counter;
}

async function statementsOf(call: () => Promise<unknown>): Promise<number> {
  const counter = countStatements();
  try {
    await call().catch(() => undefined);
    return counter.n;
  } finally {
    counter.stop();
  }
}

test("P=4 follow, decide, unfollow, block and unblock are one statement each (a missing account: the failing write and one read naming it); an unlock approving a request is a transaction of several (the counter's control)", async (t) => {
  const f = await relationsFixture(4, 10, [2]);
  t.after(() => f.close());
  const calls: [string, () => Promise<unknown>][] = [
    ["follow", () => f.rel.follow(acct(1), acct(2))],
    ["decide", () => f.rel.decide(acct(2), acct(1), true)],
    ["unfollow", () => f.rel.unfollow(acct(1), acct(2))],
    ["follow again", () => f.rel.follow(acct(3), acct(4))],
    ["block", () => f.rel.block(acct(4), acct(3))],
    ["unblock", () => f.rel.unblock(acct(4), acct(3))],
    ["missing account", () => f.rel.follow(acct(1), "nobody")],
  ];
  const counts: string[] = [];
  for (const [label, call] of calls) {
    const n = await statementsOf(call);
    counts.push(`${label}:${n}`);
    // The error path of a missing account reads which of the two is missing, to name only that one.
    assert.equal(
      n,
      label === "missing account" ? 2 : 1,
      `${label} is ${label === "missing account" ? "two statements" : "one statement"}`,
    );
  }
  assert.equal(
    await statementsOf(() => f.rel.follow(acct(5), acct(5))),
    0,
    "a self-follow is answered without a statement",
  );
  // Control: the counter sees a transaction's statements (BEGIN, account, pending rows, approval, COMMIT).
  assert.equal((await f.rel.follow(acct(6), acct(2))).state, "PENDING");
  const unlock = await statementsOf(() => f.rel.upsertAccount(acct(2), { private: false }));
  t.diagnostic(`note statements per call: ${counts.join(", ")}; an unlock approving one request: ${unlock}`);
  assert.ok(unlock > 3, `the unlock sends ${unlock}`);
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});

type Op =
  | { kind: "follow" | "unfollow" | "block" | "unblock"; a: string; b: string }
  | { kind: "decide"; a: string; b: string; approve: boolean };

/** A fixed script over 10 accounts (two private): every operation, self-targeted calls and a missing account. */
function script(): Op[] {
  const random = seededRandom(8_004);
  const pick = () => (random() < 0.02 ? "nobody" : acct(1 + Math.floor(random() * 10)));
  return Array.from({ length: 600 }, (): Op => {
    const a = pick();
    const b = random() < 0.03 ? a : pick();
    const r = random();
    if (r < 0.35) return { kind: "follow", a, b };
    if (r < 0.55) return { kind: "unfollow", a, b };
    if (r < 0.75) return { kind: "decide", a, b, approve: random() < 0.6 };
    if (r < 0.88) return { kind: "block", a, b };
    return { kind: "unblock", a, b };
  });
}

async function play(f: RelationsFixture, ops: readonly Op[]): Promise<string[]> {
  const out: string[] = [];
  for (const op of ops) {
    let result: RelationResult;
    try {
      if (op.kind === "decide") result = await f.rel.decide(op.a, op.b, op.approve);
      else result = await f.rel[op.kind](op.a, op.b);
    } catch (err) {
      out.push(`${op.kind} threw ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
      continue;
    }
    out.push(`${op.kind} ${formatRelationResult(result)} ${result.reason} ${result.code ?? ""}`);
  }
  return out;
}

async function tables(f: RelationsFixture): Promise<string> {
  const rows = await Promise.all(
    [
      "SELECT follower, followee, state, version FROM relation ORDER BY follower, followee",
      "SELECT blocker, blocked FROM block ORDER BY blocker, blocked",
      "SELECT part, seq, follower, followee, state, version FROM relation_event ORDER BY part, seq",
      "SELECT part, last FROM event_seq ORDER BY part",
    ].map(async (sql) => (await f.db.pool.query(sql)).rows),
  );
  return JSON.stringify(rows);
}

for (const partitions of [1, 4]) {
  test(`P=${partitions} with the SQL hook points on (tests) and off (production) every write has the same outcome and the rows are the same`, async (t) => {
    const direct = await relationsFixture(partitions, 10, [3, 8], { sqlHooks: false });
    const hooked = await relationsFixture(partitions, 10, [3, 8]);
    t.after(async () => {
      await direct.close();
      await hooked.close();
    });
    const setting = async (f: RelationsFixture) =>
      (await f.db.pool.query<{ s: string | null }>("SELECT current_setting('ledger.test_hooks', true) AS s")).rows[0]!
        .s;
    assert.deepEqual([await setting(direct), await setting(hooked)], [null, "on"]);
    const ops = script();
    const a = await play(direct, ops);
    const b = await play(hooked, ops);
    const tally = (prefix: string) => a.filter((o) => o.includes(prefix)).length;
    t.diagnostic(
      `note ${ops.length} writes: CHANGED=${tally("CHANGED")} NOOP=${tally("NOOP")} REJECTED=${tally("REJECTED")} threw=${tally(" threw ")}`,
    );
    assert.ok(
      tally("CHANGED") > 50 && tally("REJECTED") > 10 && tally(" threw ") > 0,
      "the script reaches every kind of outcome",
    );
    assert.deepEqual(a, b);
    assert.equal(await tables(direct), await tables(hooked));
    assert.ok(relationAuditClean(await auditRelations(direct.db.pool)));
  });
}

test("P=4 16 concurrent writers on the one-statement path over 6 accounts: every invariant holds, no deadlock", async (t) => {
  const f = await relationsFixture(4, 6, [2]);
  t.after(() => f.close());
  const deadlocks = async () =>
    Number(
      (
        await f.db.pool.query<{ n: number }>(
          "SELECT deadlocks AS n FROM pg_stat_database WHERE datname = current_database()",
        )
      ).rows[0]!.n,
    );
  const deadlocksBefore = await deadlocks();
  const retriesBefore = transactionStats.retries;
  await runWorkers(16, async (w) => {
    const random = seededRandom(8_100 + w);
    for (let i = 0; i < 40; i++) {
      const a = acct(1 + Math.floor(random() * 6));
      let b = acct(1 + Math.floor(random() * 6));
      if (a === b) b = acct(1 + (Number(a.slice(5)) % 6));
      const r = random();
      if (r < 0.4) await f.rel.follow(a, b);
      else if (r < 0.6) await f.rel.unfollow(a, b);
      else if (r < 0.75) await f.rel.decide(a, b, true);
      else if (r < 0.9) await f.rel.block(a, b);
      else await f.rel.unblock(a, b);
    }
  });
  const audit = await auditRelations(f.db.pool);
  const newDeadlocks = (await deadlocks()) - deadlocksBefore;
  t.diagnostic(
    `note audit ${JSON.stringify(audit)} deadlocks=${newDeadlocks} retries=${transactionStats.retries - retriesBefore}`,
  );
  assert.ok(relationAuditClean(audit));
  // A deadlock would have been retried (the statistics view may report it late).
  assert.equal(transactionStats.retries - retriesBefore, 0);
  assert.equal(newDeadlocks, 0);
});
