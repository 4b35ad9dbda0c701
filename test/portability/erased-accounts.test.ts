/**
 * Export and import around erased accounts (docs/import.md, docs/erasure.md): the export writes an
 * erased account as its tombstone line only, and refuses to export one; the import's check refuses,
 * before anything is written, an account line of an erased id, any fact by or towards one (but the
 * blocks made against it, which are their blockers'), a tombstone of a live account, and a line that
 * would make a private account public. An export imported elsewhere keeps the tombstone and the
 * blocks against it, so no path lifts a block its blocker did not lift.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable, Writable } from "node:stream";
import { fullAudit } from "../../src/api/routes/admin.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { exportFacts } from "../../src/portability/export.ts";
import { importFacts } from "../../src/portability/import.ts";
import { BadLinesError } from "../../src/portability/import-stage.ts";
import { createTestDatabase } from "../support/test-db.ts";

const lines = (facts: readonly object[]) => Readable.from([facts.map((f) => JSON.stringify(f)).join("\n") + "\n"]);

async function exported(pool: Pool, account?: string): Promise<string> {
  let text = "";
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString("utf8");
      done();
    },
  });
  await exportFacts(pool, out, account === undefined ? {} : { account });
  return text;
}

const parsed = (text: string) =>
  text
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

/** carol blocks dave, dave blocks bob, follows and likes; then dave is erased. */
async function world(t: { after(fn: () => Promise<void>): void }): Promise<{ pool: Pool; ledger: Ledger }> {
  const db = await createTestDatabase({ partitions: 4 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  for (const a of ["carol", "dave", "bob"]) await ledger.relations.upsertAccount(a);
  await ledger.likes.createItem("plain-1");
  await ledger.relations.block("carol", "dave");
  await ledger.relations.block("dave", "bob");
  await ledger.relations.follow("bob", "carol");
  await ledger.likes.like("dave", "plain-1");
  await ledger.likes.like("bob", "plain-1");
  await ledger.erasure.start("dave", "cli");
  await ledger.erasure.run("dave");
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  return { pool: db.pool, ledger };
}

/** What an import may have written: runs, accounts and their states, blocks. */
async function written(pool: Pool) {
  const q = async (sql: string) => (await pool.query(sql)).rows;
  return {
    runs: await q("SELECT phase FROM import_run ORDER BY run_id"),
    accounts: await q("SELECT account_id, private, erased_state FROM account ORDER BY 1"),
    blocks: await q("SELECT blocker, blocked FROM block ORDER BY 1, 2"),
    follows: await q("SELECT follower, followee, state FROM relation ORDER BY 1, 2"),
  };
}

async function refused(pool: Pool, file: readonly object[], expected: RegExp[]): Promise<void> {
  const before = await written(pool);
  await assert.rejects(importFacts(pool, lines(file)), (err: unknown) => {
    assert.ok(err instanceof BadLinesError, String(err));
    for (const e of expected) assert.match(err.message, e);
    return true;
  });
  assert.deepEqual(await written(pool), before, "nothing written");
}

test("export: an erased account is its tombstone line only, its facts are out, the blocks against it stay in; export --account of it is refused", async (t) => {
  const { pool } = await world(t);
  const out = parsed(await exported(pool));
  const about = out.filter((l) => JSON.stringify(l).includes('"dave"'));
  const blockAt = out.find((l) => l.kind === "block" && l.blocked === "dave")?.at;
  assert.deepEqual(about, [
    { kind: "account", id: "dave", erased: true },
    { kind: "block", blocker: "carol", blocked: "dave", at: blockAt },
  ]);
  // The control: the live accounts are ordinary lines with their settings.
  assert.deepEqual(
    out.filter((l) => l.kind === "account" && l.id !== "dave").map((l) => l.id),
    ["bob", "carol"],
  );
  assert.ok(out.some((l) => l.kind === "like" && l.user === "bob"));
  await assert.rejects(exported(pool, "dave"), { code: "ACCOUNT_ERASED" });
  // carol's own export names dave only as the tombstone her block needs.
  assert.deepEqual(
    parsed(await exported(pool, "carol"))
      .filter((l) => l.id === "dave" || l.blocked === "dave")
      .map((l) => l.kind),
    ["account", "block"],
  );
});

test("import: an account line of an erased id, and facts by or towards one, are refused by the check with nothing written (no run left unfinished)", async (t) => {
  const { pool } = await world(t);
  // Earlier lines that the apply's first phases would have committed before meeting dave.
  await refused(
    pool,
    [
      { kind: "account", id: "zed" },
      { kind: "item", id: "plain-2" },
      { kind: "account", id: "dave" },
    ],
    [/line 3: id: account dave was erased here/],
  );
  await refused(pool, [{ kind: "account", id: "dave", private: true }], [/account dave was erased here/]);
  await refused(
    pool,
    [
      { kind: "like", user: "dave", item: "plain-1" },
      { kind: "follow", follower: "dave", followee: "carol", state: "ACTIVE" },
      { kind: "follow", follower: "bob", followee: "dave", state: "ACTIVE" },
      { kind: "block", blocker: "dave", blocked: "carol" },
    ],
    [
      /line 1: user: dave is an erased account/,
      /line 2: follower: dave is an erased account/,
      /line 3: followee: dave is an erased account/,
      /line 4: blocker: dave is an erased account/,
    ],
  );
  // A tombstone line of a live account: an import erases nothing.
  await refused(pool, [{ kind: "account", id: "bob", erased: true }], [/erased: account bob is live here/]);
  // Facts by an account the file itself declares erased.
  await refused(
    pool,
    [
      { kind: "account", id: "newgone", erased: true },
      { kind: "like", user: "newgone", item: "plain-1" },
    ],
    [/line 2: user: newgone is an erased account/],
  );
  // The control: the same file without the erased id imports.
  const report = await importFacts(
    pool,
    lines([
      { kind: "account", id: "zed" },
      { kind: "item", id: "plain-2" },
    ]),
  );
  assert.equal(report.applied.accounts, 1);
  assert.deepEqual((await written(pool)).runs, [{ phase: "done" }]);
});

test("no path lifts carol's block of erased dave: re-importing the export here, and importing it into an empty ledger, keep the tombstone and the block", async (t) => {
  const { pool, ledger } = await world(t);
  const text = await exported(pool);
  const before = await written(pool);
  // The same ledger: the tombstone line of a tombstone and the block that exists write nothing.
  await importFacts(pool, Readable.from([text]));
  assert.deepEqual({ ...(await written(pool)), runs: [] }, { ...before, runs: [] });
  assert.equal((await fullAudit(ledger)).clean, true);

  const other = await createTestDatabase({ partitions: 4 });
  t.after(() => other.close());
  const moved = await openLedger(other.pool);
  await importFacts(other.pool, Readable.from([text]));
  const there = await written(other.pool);
  assert.deepEqual(
    there.accounts.find((a) => a.account_id === "dave"),
    { account_id: "dave", private: false, erased_state: "ERASED" },
  );
  assert.deepEqual(there.blocks, [{ blocker: "carol", blocked: "dave" }]);
  await assert.rejects(moved.relations.upsertAccount("dave"), { code: "ACCOUNT_ERASED" });
  await assert.rejects(moved.relations.follow("dave", "carol"), { code: "ACCOUNT_ERASED" });
  await assert.rejects(moved.likes.like("dave", "plain-1"), { code: "ACCOUNT_ERASED" });
  await refused(other.pool, [{ kind: "account", id: "dave" }], [/account dave was erased here/]);
  // The block's outbox event in the new ledger names nobody.
  assert.deepEqual((await other.pool.query("SELECT state, blocker, blocked FROM webhook_block_event")).rows, [
    { state: "ERASED", blocker: null, blocked: null },
  ]);
  await moved.likeConsumer.drain();
  await moved.projector.drain();
  assert.equal((await fullAudit(moved)).clean, true);
  // And an export of the new ledger is the same file.
  assert.equal(await exported(other.pool), text);
});

test("import: an account line that would make a private account public is refused (it would approve its pending requests); the same settings pass", async (t) => {
  const db = await createTestDatabase({ partitions: 4 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  await ledger.relations.upsertAccount("pat", { private: true });
  await ledger.relations.upsertAccount("bob");
  await ledger.relations.follow("bob", "pat");
  await refused(
    db.pool,
    [{ kind: "account", id: "pat", private: false }],
    [/line 1: private: account pat is private here; an import does not make it public/],
  );
  const state = async () =>
    (
      await db.pool.query(
        "SELECT (SELECT private FROM account WHERE account_id = 'pat') AS private, (SELECT state FROM relation WHERE follower = 'bob' AND followee = 'pat') AS request",
      )
    ).rows[0];
  assert.deepEqual(await state(), { private: true, request: "PENDING" });
  // The control: a line that keeps it private (and hides its collections) is imported.
  await importFacts(db.pool, lines([{ kind: "account", id: "pat", private: true, hideCollections: true }]));
  assert.deepEqual(await state(), { private: true, request: "PENDING" });
  assert.equal(
    (await db.pool.query("SELECT hide_collections FROM account WHERE account_id = 'pat'")).rows[0].hide_collections,
    true,
  );
});
