/**
 * The empty-ledger path of `social-ledger import` (docs/import.md, "The empty-ledger path"): on a
 * ledger without items or likes, the file's items and likes are loaded inside the checking
 * transaction with like_fact's indexes and keys set aside and rebuilt. It writes what the
 * resumable path writes (same facts to the `at`, baselines, counts, export); killed -9 inside its
 * one transaction it leaves nothing, not even a changed schema, and the same command starts
 * again from scratch; on a ledger that is not empty it is refused (the control: there it would
 * write over history it cannot see), and the automatic choice takes the resumable path.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { fullAudit } from "../../src/api/routes/admin.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { exportFacts } from "../../src/portability/export.ts";
import { importFacts } from "../../src/portability/import.ts";
import { LIKE_SIDE_SCHEMA, LedgerNotEmptyError } from "../../src/portability/import-empty.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { HOOK_LOCK_CLASS, SqlHook } from "../support/sql-hooks.ts";
import { CliChild, childEnv, pollUntil, processAlive, runCli } from "../cli/cli-child.ts";

const ndjson = (facts: readonly object[]) => facts.map((f) => JSON.stringify(f)).join("\n") + "\n";

async function exported(pool: Pool): Promise<string> {
  let text = "";
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString("utf8");
      done();
    },
  });
  await exportFacts(pool, out, {});
  return text;
}

async function schema(pool: Pool): Promise<string> {
  return (await pool.query<{ schema: string }>(LIKE_SIDE_SCHEMA)).rows[0]!.schema;
}

/** Every row of the like side, by the test's own SQL. */
async function likeSide(pool: Pool) {
  const q = async (text: string) => (await pool.query(text)).rows;
  return {
    facts: await q("SELECT user_id, item_id, liked, version::int, changed_at FROM like_fact ORDER BY 1, 2"),
    baselines: await q(
      "SELECT user_id, item_id, events::int, delta_sum::int, max_version::int FROM like_outbox_pruned ORDER BY 1, 2",
    ),
    counts: await q("SELECT item_id, part, n::int, base_seq::int FROM like_count ORDER BY 1, 2"),
    items: await q("SELECT item_id, kind FROM item ORDER BY 1"),
    outbox: await q("SELECT count(*)::int AS n FROM like_outbox"),
  };
}

/** Accounts, follows, a block, items, likes with and without `at`, and pairs given twice (the first line is the fact). */
function sampleFile(): object[] {
  const users = Array.from({ length: 12 }, (_, i) => `u${String(i).padStart(2, "0")}`);
  const facts: object[] = [
    ...users.map((id, i) => ({ kind: "account", id, private: i === 3 })),
    ...Array.from({ length: 5 }, (_, i) => ({ kind: "item", id: `item-${i}` })),
    { kind: "block", blocker: "u07", blocked: "u08" },
    ...users.map((u, i) => ({
      kind: "follow",
      follower: u,
      followee: users[(i + 1) % users.length],
      state: "PENDING",
    })),
  ];
  for (const [i, u] of users.entries()) {
    for (let k = 0; k < 3; k++)
      facts.push({
        kind: "like",
        user: u,
        item: `item-${(i + k) % 5}`,
        ...(k === 1 ? {} : { at: `2024-03-0${k + 1}T10:${String(i).padStart(2, "0")}:00Z` }),
      });
  }
  // Given twice, the later line with an earlier time: the first line's time is the fact's.
  facts.push({ kind: "like", user: "u00", item: "item-0", at: "2020-01-01T00:00:00Z" });
  return facts;
}

test(
  "the empty-ledger path writes what the resumable path writes: same facts to the `at`, baselines, counts, export and audits",
  { timeout: 90_000 },
  async (t) => {
    const fast = await createTestDatabase({ partitions: 4, poolSize: 6 });
    const slow = await createTestDatabase({ partitions: 4, poolSize: 6 });
    t.after(async () => {
      await fast.close();
      await slow.close();
    });
    const text = ndjson(sampleFile());
    const now = new Date("2025-06-01T00:00:00Z");
    const before = await schema(fast.pool);

    const a = await importFacts(fast.pool, Readable.from([text]), { now });
    const b = await importFacts(slow.pool, Readable.from([text]), { now, emptyLedger: "never" });
    assert.deepEqual([a.path, b.path], ["empty-ledger", "resumable"]);
    t.diagnostic(`applied: empty-ledger ${JSON.stringify(a.applied)}; resumable ${JSON.stringify(b.applied)}`);
    for (const key of ["items", "likes", "accounts", "follows", "blocks"])
      assert.equal(a.applied[key], b.applied[key], key);
    assert.equal(a.applied.likes, 36, "36 pairs: the pair given twice is one fact");

    const [sideA, sideB] = [await likeSide(fast.pool), await likeSide(slow.pool)];
    assert.deepEqual(sideA, sideB);
    const first = sideA.facts.find((f) => f.user_id === "u00" && f.item_id === "item-0") as { changed_at: Date };
    assert.equal(first.changed_at.toISOString(), "2024-03-01T10:00:00.000Z", "a pair's first line is its fact");
    assert.equal(
      await schema(fast.pool),
      before,
      "every index, key and trigger restored as the migrations define them",
    );
    assert.equal(await exported(fast.pool), await exported(slow.pool));
    for (const pool of [fast.pool, slow.pool]) {
      const audit = await fullAudit(await openLedger(pool));
      assert.equal(audit.clean, true, JSON.stringify(audit));
    }

    // Live writes after it use the rebuilt indexes and keys: an unlike and a like of a pair the file wrote.
    const ledger = await openLedger(fast.pool);
    await ledger.likes.unlike("u00", "item-0");
    await ledger.likes.like("u05", "item-0");
    await ledger.likeConsumer.drain();
    assert.equal((await fullAudit(ledger)).clean, true);
  },
);

test(
  "round trip through the empty-ledger path: export, import into an empty ledger, export again is the same file",
  { timeout: 90_000 },
  async (t) => {
    const a = await createTestDatabase({ partitions: 4, poolSize: 6 });
    const b = await createTestDatabase({ partitions: 4, poolSize: 6 });
    t.after(async () => {
      await a.close();
      await b.close();
    });
    await importFacts(a.pool, Readable.from([ndjson(sampleFile())]), { emptyLedger: "never" });
    const la = await openLedger(a.pool);
    await la.likes.unlike("u01", "item-1");
    await la.likes.like("u01", "item-4");
    await la.likeConsumer.drain();
    const fromA = await exported(a.pool);
    const report = await importFacts(b.pool, Readable.from([fromA]), { emptyLedger: "require" });
    assert.equal(report.path, "empty-ledger");
    assert.equal(await exported(b.pool), fromA, "the export of the imported ledger is the same file");
    const [auditA, auditB] = [await fullAudit(la), await fullAudit(await openLedger(b.pool))];
    assert.equal(auditA.clean && auditB.clean, true, JSON.stringify(auditB));
    const counts = async (pool: Pool) =>
      (await pool.query("SELECT item_id, part, n::int FROM like_count WHERE n <> 0 ORDER BY 1, 2")).rows;
    assert.deepEqual(await counts(b.pool), await counts(a.pool), "the same count per item and partition");
  },
);

test(
  "control: a ledger with items or likes refuses --empty-ledger (LEDGER_NOT_EMPTY, nothing written); the automatic choice takes the resumable path and writes the pair's history as an event",
  { timeout: 90_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 6 });
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-import-empty-"));
    t.after(async () => {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    });
    const ledger = await openLedger(db.pool);
    await ledger.likes.createItem("i1");
    await ledger.likes.like("alice", "i1");
    await ledger.likes.unlike("alice", "i1");
    const text = ndjson([
      { kind: "item", id: "i1" },
      { kind: "item", id: "i2" },
      { kind: "like", user: "alice", item: "i1" },
      { kind: "like", user: "bob", item: "i2" },
    ]);
    const before = await likeSide(db.pool);

    await assert.rejects(
      importFacts(db.pool, Readable.from([text]), { emptyLedger: "require" }),
      (err: unknown) => err instanceof LedgerNotEmptyError && err.code === "LEDGER_NOT_EMPTY",
    );
    const file = path.join(dir, "facts.ndjson");
    await writeFile(file, text);
    const cli = await runCli(
      ["import", file, "--empty-ledger"],
      childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dir }),
    );
    assert.equal(cli.code, 2, cli.stderr);
    assert.match(cli.stderr, /empty-ledger import needs a ledger without items, likes .*it has items, it has likes/);
    assert.deepEqual(await likeSide(db.pool), before, "nothing written");
    assert.equal((await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM import_run")).rows[0]!.n, 0);

    // What the load would have got wrong: alice's pair has two events; a bulk insert at version 1
    // would collide with it. The resumable path likes it again through the live write: version 3, an event.
    const report = await importFacts(db.pool, Readable.from([text]));
    assert.equal(report.path, "resumable");
    const { rows } = await db.pool.query<{ version: number; liked: boolean; events: number }>(
      "SELECT f.version::int, f.liked, (SELECT count(*)::int FROM like_outbox o WHERE o.user_id = f.user_id AND o.item_id = f.item_id) AS events FROM like_fact f WHERE user_id = 'alice'",
    );
    assert.deepEqual(rows[0], { version: 3, liked: true, events: 3 });
    await ledger.likeConsumer.drain();
    assert.equal((await fullAudit(ledger)).clean, true);
  },
);

test(
  "the empty-ledger path killed -9 inside its transaction leaves nothing (schema included); the same command loads it from scratch",
  { timeout: 180_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 4, poolSize: 6 });
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-import-empty-kill-"));
    const children: CliChild[] = [];
    t.after(async () => {
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      for (const child of children) assert.equal(processAlive(child.pid), false, `${child.name} is gone`);
      await db.close();
      await rm(dir, { recursive: true, force: true });
    });
    const facts = sampleFile();
    const file = path.join(dir, "facts.ndjson");
    await writeFile(file, ndjson(facts));
    const env = childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dir });
    const before = await schema(db.pool);

    // Parked after the rows are in, before the index builds: the load's whole transaction is open.
    const hook = await SqlHook.arm(db.pool, "import.emptyLedgerLoaded");
    let parkedPid: number;
    try {
      const child = new CliChild("import", ["import", file, "--empty-ledger"], env);
      children.push(child);
      const parked = await pollUntil(
        "the import parks at import.emptyLedgerLoaded",
        async () =>
          (
            await db.pool.query<{ pid: number }>(
              `SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND l.objsubid = 2 AND NOT l.granted
            AND l.objid::bigint = (hashtext('import.emptyLedgerLoaded')::bigint & 4294967295)`,
              [HOOK_LOCK_CLASS],
            )
          ).rows,
        (rows) => rows.length === 1,
        60_000,
      );
      parkedPid = parked[0]!.pid;
      // What the load holds while it runs (docs/import.md, "What the empty-ledger path locks").
      const { rows: held } = await db.pool.query<{ lock: string }>(
        `SELECT l.relation::regclass::text || ' ' || l.mode AS lock FROM pg_locks l
        WHERE l.pid = $1 AND l.locktype = 'relation' AND l.granted AND l.relation::regclass::text IN ('like_fact', 'like_count', 'like_outbox_pruned', 'item', 'like_seq')
        ORDER BY 1`,
        [parkedPid],
      );
      t.diagnostic(`held while parked: ${held.map((h) => h.lock).join(", ")}`);
      const locks = held.map((h) => h.lock);
      // The foreign keys set aside take their referenced tables too (their triggers live there): item and like_seq.
      for (const table of ["like_fact", "like_count", "like_outbox_pruned", "item", "like_seq"])
        assert.ok(locks.includes(`${table} AccessExclusiveLock`), `${table}: ${locks.join(", ")}`);
      const exit = await child.stop("SIGKILL");
      assert.equal(exit.signal, "SIGKILL");
    } finally {
      await hook.release();
    }
    // The backend goes on from the hook, finds its client gone and rolls back.
    await pollUntil(
      "the killed import's backend is gone",
      async () =>
        (
          await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1", [
            parkedPid,
          ])
        ).rows[0]!.n,
      (n) => n === 0,
      60_000,
    );
    const { rows: left } = await db.pool.query(
      `SELECT (SELECT count(*) FROM like_fact)::int AS facts, (SELECT count(*) FROM item)::int AS items, (SELECT count(*) FROM like_count)::int AS counts,
            (SELECT count(*) FROM like_outbox_pruned)::int AS baselines, (SELECT count(*) FROM import_run)::int AS runs, (SELECT count(*) FROM account)::int AS accounts`,
    );
    assert.deepEqual(
      left[0],
      { facts: 0, items: 0, counts: 0, baselines: 0, runs: 0, accounts: 0 },
      "nothing of the run is left",
    );
    assert.equal(await schema(db.pool), before, "indexes, keys and the erasure guard are as before");

    const rerun = await runCli(["import", file, "--empty-ledger"], env, 120_000);
    assert.equal(rerun.code, 0, rerun.stderr);
    assert.match(rerun.stdout, /\(empty-ledger path\), done/);
    // Independent SQL: every distinct pair of the file liked once at version 1, counts equal the facts per item.
    const expected = new Map<string, Set<string>>();
    for (const f of facts as { kind: string; user?: string; item?: string }[]) {
      if (f.kind === "like") (expected.get(f.item!) ?? expected.set(f.item!, new Set()).get(f.item!)!).add(f.user!);
    }
    const { rows } = await db.pool.query<{ item_id: string; facts: number; shown: number; versions: number[] }>(
      `SELECT i.item_id, (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked)::int AS facts,
            (SELECT coalesce(sum(n), 0) FROM like_count c WHERE c.item_id = i.item_id)::int AS shown,
            (SELECT array_agg(DISTINCT version::int) FROM like_fact f WHERE f.item_id = i.item_id) AS versions FROM item i ORDER BY 1`,
    );
    assert.equal(rows.length, 5);
    for (const r of rows)
      assert.deepEqual(
        [r.facts, r.shown, r.versions],
        [expected.get(r.item_id)!.size, expected.get(r.item_id)!.size, [1]],
        r.item_id,
      );
    assert.equal(await schema(db.pool), before);
    const audit = await runCli(["audit"], env);
    assert.equal(audit.code, 0, audit.stdout + audit.stderr);
    const third = await runCli(["import", file], env);
    assert.equal(third.code, 0, third.stderr);
    assert.match(third.stdout, /was imported before; nothing changed/);
  },
);
