/**
 * Import: the live writes' rules hold for imported facts, checked with SQL of the
 * test's own next to the project's audit; the same file twice changes nothing; an export imported
 * into an empty database gives the same facts, counts and export (round trip).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable, Writable } from "node:stream";
import { fullAudit } from "../../src/api/routes/admin.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { exportFacts } from "../../src/portability/export.ts";
import { importFacts } from "../../src/portability/import.ts";
import { BadLinesError } from "../../src/portability/import-stage.ts";
import { pruneRetained } from "../../src/retention/retention.ts";
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

/** The counts, recomputed from the facts by the test's own SQL next to what the derived side shows. */
async function countsAgainstFacts(pool: Pool) {
  const { rows: likes } = await pool.query<{ item_id: string; facts: number; shown: number }>(
    `SELECT i.item_id, (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked)::int AS facts,
            (SELECT coalesce(sum(n), 0) FROM like_count c WHERE c.item_id = i.item_id)::int AS shown
       FROM item i ORDER BY 1`,
  );
  const { rows: followers } = await pool.query<{ account_id: string; facts: number; shown: number; projected: number }>(
    `SELECT a.account_id, (SELECT count(*) FROM relation r WHERE r.followee = a.account_id AND r.state = 'ACTIVE')::int AS facts,
            (SELECT coalesce(sum(n), 0) FROM proj_count c WHERE c.followee = a.account_id)::int AS shown,
            (SELECT count(*) FROM proj_follower p WHERE p.followee = a.account_id AND p.state = 'ACTIVE')::int AS projected
       FROM account a ORDER BY 1`,
  );
  return { likes, followers };
}

function assertExact(counts: Awaited<ReturnType<typeof countsAgainstFacts>>): void {
  for (const l of counts.likes) assert.equal(l.shown, l.facts, `like_count of ${l.item_id}`);
  for (const f of counts.followers)
    assert.deepEqual([f.shown, f.projected], [f.facts, f.facts], `followers of ${f.account_id}`);
}

test(
  "imported facts follow the live rules; counts, projection and audit exact; the same file twice changes nothing",
  { timeout: 60_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 4, poolSize: 8 });
    t.after(() => db.close());
    const ledger = await openLedger(db.pool);
    // Already in the database: erin follows dave (an event), a like of an item with history.
    await ledger.relations.upsertAccount("dave");
    await ledger.relations.upsertAccount("erin");
    await ledger.relations.follow("erin", "dave");
    await ledger.likes.createItem("old");
    await ledger.likes.like("bob", "old");
    await ledger.likes.unlike("bob", "old");
    await ledger.likeConsumer.drain();
    await ledger.projector.drain();

    const file = [
      { kind: "like", user: "carol", item: "i3" }, // the item is declared further down
      { kind: "account", id: "alice", private: false },
      { kind: "account", id: "bob", private: true },
      { kind: "account", id: "carol" },
      { kind: "item", id: "i1" },
      { kind: "item", id: "i2" },
      { kind: "follow", follower: "alice", followee: "bob", state: "PENDING", at: "2023-03-01T10:00:00Z" },
      { kind: "follow", follower: "carol", followee: "alice", state: "PENDING" }, // alice is public: ACTIVE
      { kind: "follow", follower: "bob", followee: "carol", state: "ACTIVE" }, // carol blocks bob below
      { kind: "block", blocker: "carol", blocked: "bob", at: "2023-04-01T00:00:00.123456Z" },
      { kind: "block", blocker: "dave", blocked: "erin" }, // erin's follow of dave in the database goes
      { kind: "follow", follower: "frank", followee: "alice", state: "ACTIVE" }, // frank: created, as the API does
      { kind: "like", user: "alice", item: "i1", at: "2024-01-01T00:00:00Z" },
      { kind: "like", user: "alice", item: "i1", at: "2025-01-01T00:00:00Z" }, // a duplicate: the first line is the fact
      { kind: "like", user: "bob", item: "i1" },
      { kind: "like", user: "zed", item: "i2" }, // a like needs no account
      { kind: "like", user: "bob", item: "old" }, // a pair with history: like_set writes its event
      { kind: "item", id: "i3" },
    ];
    const report = await importFacts(db.pool, lines(file), { batchSize: 3 });
    t.diagnostic(`note import: ${JSON.stringify(report)}`);
    assert.equal(report.existing, "none");
    await ledger.likeConsumer.drain();
    await ledger.projector.drain();

    const { rows: relations } = await db.pool.query<{ pair: string; state: string }>(
      "SELECT follower || '->' || followee AS pair, state FROM relation WHERE state <> 'REMOVED' ORDER BY 1",
    );
    assert.deepEqual(relations, [
      { pair: "alice->bob", state: "PENDING" },
      { pair: "carol->alice", state: "ACTIVE" },
      { pair: "frank->alice", state: "ACTIVE" },
    ]);
    const { rows: accounts } = await db.pool.query("SELECT account_id, private FROM account ORDER BY 1");
    assert.deepEqual(
      accounts.map((a) => `${a.account_id}:${a.private}`),
      ["alice:false", "bob:true", "carol:false", "dave:false", "erin:false", "frank:false"],
    );
    const { rows: liked } = await db.pool.query<{ like: string; at: string }>(
      "SELECT user_id || '/' || item_id AS like, to_char(changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS at FROM like_fact WHERE liked ORDER BY 1",
    );
    assert.deepEqual(
      liked.map((l) => l.like),
      ["alice/i1", "bob/i1", "bob/old", "carol/i3", "zed/i2"],
    );
    assert.equal(liked[0]!.at, "2024-01-01", "likedAt is the first line's at");
    const { rows: blockAt } = await db.pool.query(
      "SELECT to_char(created_at AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS at FROM block WHERE blocker = 'carol'",
    );
    assert.equal(blockAt[0]!.at, "00:00:00.123456");
    // Only the pairs with history wrote events: bob's like of "old", and the REMOVED of erin -> dave.
    const { rows: events } = await db.pool.query(
      "SELECT (SELECT count(*) FROM like_outbox)::int AS likes, (SELECT count(*) FROM relation_event)::int AS relations",
    );
    assert.deepEqual(events[0], { likes: 3, relations: 2 });

    const counts = await countsAgainstFacts(db.pool);
    assertExact(counts);
    assert.deepEqual(
      counts.likes.map((l) => `${l.item_id}=${l.facts}`),
      ["i1=2", "i2=1", "i3=1", "old=1"],
    );
    const audit = await fullAudit(ledger);
    assert.equal(audit.clean, true, JSON.stringify(audit));
    assert.notEqual(audit.relations.projectionDiff, null);
    assert.equal(
      (await ledger.likeRebuild.rebuild()).totalAbsDrift,
      0,
      "a rebuild after the import finds nothing to correct",
    );

    // The same file again: the run is found by its digest, nothing is written.
    const before = await exported(db.pool);
    const again = await importFacts(db.pool, lines(file));
    assert.equal(again.existing, "done");
    // The same facts in another order (another file): every line is already true, nothing is written.
    const reordered = await importFacts(db.pool, lines([...file].reverse()));
    assert.equal(reordered.existing, "none");
    const written = Object.entries(reordered.applied).filter(([k, v]) => k !== "caches" && v !== 0);
    assert.deepEqual(written, [], JSON.stringify(reordered.applied));
    assert.equal(await exported(db.pool), before);
    assert.equal((await fullAudit(ledger)).clean, true);
    const { rows: staged } = await db.pool.query("SELECT count(*)::int AS n FROM import_stage");
    assert.equal(staged[0]!.n, 0, "a finished run leaves no staged lines");

    // The control: without its history baseline an imported fact is a version without an event,
    // and the write-side audit says so (what an import that skipped the baseline would leave).
    await db.pool.query("DELETE FROM like_outbox_pruned WHERE user_id = 'zed'");
    const broken = await fullAudit(ledger);
    assert.equal(broken.clean, false);
    assert.equal(broken.likes.writeSide.versionMismatchPairs, 1);
  },
);

test(
  "a file with bad lines is refused whole, every bad line reported by number, nothing written",
  { timeout: 60_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
    t.after(() => db.close());
    const text = [
      JSON.stringify({ kind: "account", id: "alice" }),
      "{not json",
      JSON.stringify({ kind: "post", id: "p1" }),
      JSON.stringify({ kind: "like", user: "alice", item: "i1", extra: 1 }),
      JSON.stringify({ kind: "like", user: "bad id", item: "i1" }),
      JSON.stringify({ kind: "like", user: "alice", item: "i1", at: "2024-02-30T00:00:00Z" }),
      JSON.stringify({ kind: "like", user: "alice", item: "nowhere" }),
      JSON.stringify({ kind: "follow", follower: "alice", followee: "ghost", state: "ACTIVE" }),
      JSON.stringify({ kind: "follow", follower: "alice", followee: "alice", state: "ACTIVE" }),
      JSON.stringify({ kind: "item", id: "i1" }),
      JSON.stringify({ kind: "account", id: "alice", private: true }),
      JSON.stringify({ kind: "like", user: "alice", item: "i1", at: "2999-01-01T00:00:00Z" }),
      ...Array.from({ length: 15 }, (_, i) =>
        JSON.stringify({ kind: "block", blocker: "alice", blocked: `nobody-${i}` }),
      ),
    ].join("\n");
    await assert.rejects(importFacts(db.pool, Readable.from([text])), (err: unknown) => {
      assert.ok(err instanceof BadLinesError);
      assert.equal(err.total, 25);
      assert.deepEqual(
        err.badLines.map((b) => b.line),
        [2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22],
      );
      assert.match(err.message, /line 3: kind: posts are not importable yet/);
      assert.match(err.message, /line 7: item: nowhere is neither declared/);
      assert.match(err.message, /line 11: id: account alice is declared with other settings on line 1/);
      assert.match(err.message, /and 5 more$/);
      return true;
    });
    const { rows } = await db.pool.query(
      `SELECT (SELECT count(*) FROM import_stage)::int AS staged, (SELECT count(*) FROM import_run)::int AS runs,
            (SELECT count(*) FROM account)::int AS accounts, (SELECT count(*) FROM item)::int AS items`,
    );
    assert.deepEqual(rows[0], { staged: 0, runs: 0, accounts: 0, items: 0 });
  },
);

test(
  "round trip: the export of a database built by live writes, imported into an empty one, gives the same facts, counts and export",
  { timeout: 60_000 },
  async (t) => {
    const a = await createTestDatabase({ partitions: 4, poolSize: 8 });
    const b = await createTestDatabase({ partitions: 4, poolSize: 8 });
    t.after(async () => {
      await a.close();
      await b.close();
    });
    const la = await openLedger(a.pool);
    const users = Array.from({ length: 12 }, (_, i) => `u${i}`);
    for (const u of users) await la.relations.upsertAccount(u, { private: u === "u3" });
    for (let i = 0; i < 6; i++) await la.likes.createItem(`item-${i}`);
    for (const [i, u] of users.entries()) {
      for (let k = 0; k < 4; k++) await la.likes.like(u, `item-${(i + k) % 6}`);
      await la.relations.follow(u, users[(i + 1) % users.length]!);
      await la.relations.follow(u, users[(i + 5) % users.length]!);
    }
    await la.likes.unlike("u0", "item-0");
    await la.relations.block("u7", "u8");
    await la.likeConsumer.drain();
    await la.projector.drain();
    const fromA = await exported(a.pool);

    await importFacts(b.pool, Readable.from([fromA]));
    const lb = await openLedger(b.pool);
    assert.equal((await fullAudit(la)).clean, true);
    const auditB = await fullAudit(lb);
    assert.equal(auditB.clean, true, JSON.stringify(auditB));
    const [countsA, countsB] = [await countsAgainstFacts(a.pool), await countsAgainstFacts(b.pool)];
    assertExact(countsB);
    assert.deepEqual(countsB, countsA);
    assert.equal(await exported(b.pool), fromA, "the export of the imported database is the same file");

    // One account's export: its own facts and what they name, never who blocks it.
    const u8 = (await exported(a.pool, "u8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(
      u8.every((f) => f.kind !== "block"),
      "u8 is blocked by u7: that is not u8's data",
    );
    assert.ok(u8.some((f) => f.kind === "like" && f.user === "u8"));
    assert.ok(u8.filter((f) => f.kind === "follow").every((f) => f.follower === "u8"));
  },
);

test(
  "imported facts live on: later live writes of the same pairs, the consumers and a prune to the watermarks keep every audit clean",
  { timeout: 60_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 6 });
    t.after(() => db.close());
    const ledger = await openLedger(db.pool);
    await importFacts(
      db.pool,
      lines([
        { kind: "account", id: "a" },
        { kind: "account", id: "b", private: true },
        { kind: "item", id: "i" },
        { kind: "follow", follower: "a", followee: "b", state: "ACTIVE" },
        { kind: "follow", follower: "b", followee: "a", state: "PENDING" },
        { kind: "like", user: "a", item: "i" },
        { kind: "like", user: "b", item: "i" },
      ]),
    );
    // The imported version 1 is the baseline's; the live writes go on at version 2.
    assert.equal((await ledger.relations.unfollow("a", "b")).version, 2);
    assert.equal((await ledger.likes.unlike("a", "i")).outcome, "CHANGED");
    await ledger.relations.follow("a", "b");
    await ledger.likeConsumer.drain();
    await ledger.projector.drain();
    await ledger.notifications.drain();
    await ledger.feed.drain();
    assert.equal((await fullAudit(ledger)).clean, true);
    await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 0 });
    const audit = await fullAudit(ledger);
    assert.equal(audit.clean, true, JSON.stringify(audit));
    assertExact(await countsAgainstFacts(db.pool));
    const { rows } = await db.pool.query(
      "SELECT events::int, max_version::int, last_state FROM relation_event_pruned WHERE follower = 'a' AND followee = 'b'",
    );
    assert.deepEqual(
      rows,
      [{ events: 3, max_version: 3, last_state: "PENDING" }],
      "the prune folded the live events into the import's baseline",
    );
  },
);
