import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { loadMigrations, migrate, migrationStatus, type Migration } from "../../src/db/migrate.ts";
import { withTransaction } from "../../src/db/transaction.ts";
import { createTestDatabase, databaseUrl } from "../support/test-db.ts";

/**
 * The migration runner: concurrent migrators on a fresh, empty database apply every
 * migration exactly once; a second run applies nothing; numbering gaps are refused.
 * Collisions are made deterministic with an advisory lock held by the test and observed
 * in pg_locks (granted = false), never by sleeping.
 */

const ADVISORY_KEY = 4242;
const LIKES_TABLES = [
  "ledger_config",
  "item",
  "like_fact",
  "like_seq",
  "like_outbox",
  "like_count",
  "processed_event",
  "counter_watermark",
  "like_rebuild_run",
  "like_rebuild_drift",
];

function adminUrl(): string {
  const url = process.env.LEDGER_TEST_PG_URL;
  if (!url) throw new Error("LEDGER_TEST_PG_URL is not set: run the suite with `npm test`");
  return url;
}

/** A new, EMPTY database (not cloned from the migrated template). */
async function emptyDatabase(): Promise<{
  url: string;
  pools: Pool[];
  pool(name: string): Pool;
  drop(): Promise<void>;
}> {
  const name = `m_${randomBytes(6).toString("hex")}`;
  const admin = createPool({ connectionString: adminUrl(), max: 1 });
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = databaseUrl(adminUrl(), name);
  const pools: Pool[] = [];
  return {
    url,
    pools,
    pool(applicationName: string) {
      const pool = createPool({ connectionString: url, max: 1, applicationName });
      pools.push(pool);
      return pool;
    },
    async drop() {
      await Promise.all(pools.map((p) => p.end()));
      const a = createPool({ connectionString: adminUrl(), max: 1 });
      try {
        await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}

async function backendPid(observer: Pool, applicationName: string): Promise<number> {
  const { rows } = await observer.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
    [applicationName],
  );
  assert.equal(rows.length, 1, `exactly one backend for ${applicationName}`);
  return rows[0]!.pid;
}

/** Bounded polling of pg_locks: resolves once a backend of `applicationName` waits for a lock. */
async function waitUntilBlocked(
  observer: Pool,
  applicationName: string,
  timeoutMs = 10_000,
): Promise<{ pid: number; locktype: string; blockers: number[] }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await observer.query<{ pid: number; locktype: string; blockers: number[] }>(
      `SELECT l.pid, l.locktype, pg_blocking_pids(l.pid) AS blockers
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND NOT l.granted`,
      [applicationName],
    );
    if (rows.length > 0) return rows[0]!;
    if (Date.now() > deadline)
      throw new Error(`${applicationName} did not start waiting for a lock within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5)); // poll interval, not synchronisation
  }
}

async function ledgerRows(pool: Pool): Promise<{ id: number; name: string }[]> {
  const { rows } = await pool.query<{ id: number; name: string }>("SELECT id, name FROM ledger_migration ORDER BY id");
  return rows;
}

async function missingTables(pool: Pool, tables: readonly string[]): Promise<string[]> {
  const { rows } = await pool.query<{ t: string }>(
    "SELECT t FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NULL",
    [tables],
  );
  return rows.map((r) => r.t);
}

/**
 * 001 creates a table that records every execution of a migration body, 002 blocks on an
 * advisory lock the test holds and records itself, 003 records itself. A migration body that
 * runs twice leaves two rows in mig_effect.
 */
const CONTROLLED: Migration[] = [
  { id: 1, name: "001_effects.sql", sql: "CREATE TABLE mig_effect (migration integer NOT NULL, pid integer NOT NULL)" },
  {
    id: 2,
    name: "002_blocking.sql",
    sql: `SELECT pg_advisory_xact_lock(${ADVISORY_KEY});
          INSERT INTO mig_effect (migration, pid) VALUES (2, pg_backend_pid());`,
  },
  { id: 3, name: "003_after.sql", sql: "INSERT INTO mig_effect (migration, pid) VALUES (3, pg_backend_pid())" },
];

async function effects(pool: Pool): Promise<{ migration: number; pid: number }[]> {
  const { rows } = await pool.query<{ migration: number; pid: number }>(
    "SELECT migration, pid FROM mig_effect ORDER BY migration, pid",
  );
  return rows;
}

/**
 * Migrator A is parked inside migration 002 (its ledger_migration row inserted, not committed,
 * the body waiting for the advisory lock); then migrator B starts. Returns once B is seen
 * waiting in pg_locks, with the handles to finish the scenario.
 */
async function collide(run: (pool: Pool, migrations: Migration[]) => Promise<{ applied: string[] }>): Promise<{
  pool: Pool;
  aPid: number;
  bWait: { pid: number; locktype: string; blockers: number[] };
  release(): Promise<[{ applied: string[] }, { applied: string[] }]>;
  drop(): Promise<void>;
}> {
  const db = await emptyDatabase();
  const observer = db.pool("observer");
  const holder = db.pool("lock-holder");
  await holder.query("SELECT pg_advisory_lock($1)", [ADVISORY_KEY]);
  const a = run(db.pool("migrator-a"), CONTROLLED);
  a.catch(() => undefined);
  const aWait = await waitUntilBlocked(observer, "migrator-a");
  assert.equal(aWait.locktype, "advisory", "A is parked inside the body of 002");
  const aPid = await backendPid(observer, "migrator-a");
  const b = run(db.pool("migrator-b"), CONTROLLED);
  b.catch(() => undefined);
  const bWait = await waitUntilBlocked(observer, "migrator-b");
  return {
    pool: observer,
    aPid,
    bWait,
    async release() {
      await holder.query("SELECT pg_advisory_unlock($1)", [ADVISORY_KEY]);
      return Promise.all([a, b]);
    },
    drop: () => db.drop(),
  };
}

test("two migrators at once on an empty database: both succeed, every migration applied once", async (t) => {
  for (let round = 0; round < 3; round++) {
    const db = await emptyDatabase();
    t.after(() => db.drop());
    const [a, b] = await Promise.all([migrate(db.pool(`race-a-${round}`)), migrate(db.pool(`race-b-${round}`))]);
    const shipped = (await loadMigrations()).map((m) => m.name);
    const all = [...a.applied, ...b.applied].sort();
    assert.deepEqual(all, shipped, `round ${round}: each shipped migration was applied by exactly one migrator`);
    const check = db.pool(`check-${round}`);
    assert.deepEqual(
      (await ledgerRows(check)).map((r) => r.name),
      shipped,
      "one ledger row per migration",
    );
    assert.deepEqual(await missingTables(check, LIKES_TABLES), [], "the tables of 001 exist");
    assert.deepEqual(await migrationStatus(check), { latest: shipped.length, applied: shipped.length });
  }
});

test("deterministic collision: B waits on A's uncommitted ledger row, then skips the migration", async (t) => {
  const c = await collide(migrate);
  t.after(() => c.drop());
  assert.equal(c.bWait.locktype, "transactionid", "B waits on A's transaction (the unique key of ledger_migration)");
  assert.deepEqual(c.bWait.blockers, [c.aPid], "B is blocked by A and nothing else");
  const uncommitted = await c.pool.query<{ wait_event_type: string; query: string }>(
    "SELECT wait_event_type, query FROM pg_stat_activity WHERE pid = $1",
    [c.bWait.pid],
  );
  assert.equal(uncommitted.rows[0]!.wait_event_type, "Lock");
  assert.match(uncommitted.rows[0]!.query, /INSERT INTO ledger_migration/);
  assert.deepEqual(await effects(c.pool), [], "002 has not committed anywhere yet");

  const [a, b] = await c.release();
  assert.deepEqual(a.applied.slice(0, 2), ["001_effects.sql", "002_blocking.sql"], "A applied 001 and 002");
  assert.ok(!b.applied.includes("001_effects.sql") && !b.applied.includes("002_blocking.sql"), "B skipped 001 and 002");
  assert.deepEqual(
    [...a.applied, ...b.applied].sort(),
    CONTROLLED.map((m) => m.name),
    "003 applied by exactly one of them",
  );
  const rows = await effects(c.pool);
  assert.deepEqual(
    rows.filter((r) => r.migration === 2),
    [{ migration: 2, pid: c.aPid }],
    "the body of 002 ran once, in A",
  );
  assert.equal(rows.filter((r) => r.migration === 3).length, 1, "the body of 003 ran once");
  assert.deepEqual(
    (await ledgerRows(c.pool)).map((r) => r.id),
    [1, 2, 3],
  );
});

test("negative control: a check-then-apply migrator runs the body of 002 twice in the same interleaving", async (t) => {
  const naive = async (pool: Pool, migrations: Migration[]): Promise<{ applied: string[] }> => {
    await pool.query(
      "CREATE TABLE IF NOT EXISTS ledger_migration (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    );
    const applied: string[] = [];
    for (const m of migrations) {
      const seen = await pool.query("SELECT 1 FROM ledger_migration WHERE id = $1", [m.id]);
      if (seen.rows.length > 0) continue;
      await withTransaction(pool, async (client) => {
        await client.query(m.sql);
        await client.query("INSERT INTO ledger_migration (id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING", [
          m.id,
          m.name,
        ]);
      });
      applied.push(m.name);
    }
    return { applied };
  };
  const c = await collide(naive);
  t.after(() => c.drop());
  assert.equal(c.bWait.locktype, "advisory", "B got into the body of 002 as well");
  await c.release();
  const twice = (await effects(c.pool)).filter((r) => r.migration === 2);
  assert.equal(twice.length, 2, "the exactly-once assertion of the previous test would fail here");
});

test("first-time race on ledger_migration itself: both migrators tolerate the loser's catalog error", async (t) => {
  const db = await emptyDatabase();
  t.after(() => db.drop());
  const observer = db.pool("observer");
  const creator = await db.pool("creator").connect();
  const ddl =
    "CREATE TABLE IF NOT EXISTS ledger_migration (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";
  let a: Promise<{ applied: string[] }>;
  let b: Promise<{ applied: string[] }>;
  let raw: Promise<unknown>;
  try {
    // A third session creates the table and holds the transaction open: every other
    // CREATE TABLE IF NOT EXISTS cannot see it yet and queues on its catalog rows.
    await creator.query("BEGIN");
    await creator.query(ddl);
    a = migrate(
      db.pool("first-a"),
      CONTROLLED.filter((m) => m.id !== 2),
    );
    b = migrate(
      db.pool("first-b"),
      CONTROLLED.filter((m) => m.id !== 2),
    );
    // Negative control: the same statement issued bare fails once the creator commits,
    // so the runner really does have to absorb that error.
    raw = db
      .pool("bare")
      .query(ddl)
      .then(
        () => "succeeded",
        (err: { sqlState?: string }) => err.sqlState,
      );
    for (const name of ["first-a", "first-b", "bare"]) {
      const wait = await waitUntilBlocked(observer, name);
      assert.equal(wait.locktype, "transactionid", `${name} waits for the creator's transaction`);
    }
    await creator.query("COMMIT");
  } finally {
    creator.release();
  }
  const bareOutcome = await raw;
  assert.ok(
    bareOutcome === "23505" || bareOutcome === "42P07",
    `the bare statement failed with ${String(bareOutcome)}`,
  );
  t.diagnostic(`note a bare CREATE TABLE IF NOT EXISTS losing the race fails with ${String(bareOutcome)}`);
  const [ra, rb] = await Promise.all([a, b]);
  assert.deepEqual([...ra.applied, ...rb.applied].sort(), ["001_effects.sql", "003_after.sql"]);
  assert.equal((await effects(observer)).length, 1);
});

test("first-time race, free-running: every catalog error a losing creator can see is absorbed", async (t) => {
  // migrate(pool, []) runs only the creation of ledger_migration. Rounds of four migrators
  // on fresh connections, started at once, hit every timing window of the race: 23505
  // (queued on the winner's catalog row), and now and then 42710 (the winner's row type
  // committed between the loser's two catalog checks), which no interleaving under the
  // test's control can force.
  const db = await emptyDatabase();
  t.after(() => db.drop());
  const admin = db.pool("race-admin");
  const ddl =
    "CREATE TABLE IF NOT EXISTS ledger_migration (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";
  async function race<T>(round: number, run: (pool: Pool) => Promise<T>): Promise<PromiseSettledResult<T>[]> {
    await admin.query("DROP TABLE IF EXISTS ledger_migration");
    const pools = [0, 1, 2, 3].map((i) =>
      createPool({ connectionString: db.url, max: 1, applicationName: `race-${round}-${i}` }),
    );
    try {
      return await Promise.allSettled(pools.map(run));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  }
  // Negative control: the bare statement under the same race does fail, so the runner's
  // tolerance is exercised rather than vacuous.
  const bareCodes = new Map<string, number>();
  for (let round = 0; round < 25; round++) {
    for (const r of await race(round, (p) => p.query(ddl))) {
      const key = r.status === "fulfilled" ? "ok" : String((r.reason as { sqlState?: string }).sqlState);
      bareCodes.set(key, (bareCodes.get(key) ?? 0) + 1);
    }
  }
  t.diagnostic(
    `note bare CREATE TABLE IF NOT EXISTS outcomes over 25 rounds of 4: ${JSON.stringify(Object.fromEntries(bareCodes))}`,
  );
  assert.ok(
    [...bareCodes.keys()].some((k) => k !== "ok"),
    "the race produced at least one catalog error",
  );
  assert.deepEqual(
    [...bareCodes.keys()].filter((k) => !["ok", "23505", "42P07", "42710"].includes(k)),
    [],
    "no other error class",
  );
  for (let round = 0; round < 80; round++) {
    const failed = (await race(round, (p) => migrate(p, [])))
      .filter((r): r is PromiseRejectedResult => r.status === "rejected")
      .map((r) => String(r.reason));
    assert.deepEqual(failed, [], `round ${round}: no migrator failed`);
  }
  assert.deepEqual(await missingTables(admin, ["ledger_migration"]), []);
});

test("migrate is idempotent: a second run applies nothing and changes nothing", async (t) => {
  const db = await emptyDatabase();
  t.after(() => db.drop());
  const pool = db.pool("idempotent");
  const first = await migrate(pool);
  assert.deepEqual(
    first.applied,
    (await loadMigrations()).map((m) => m.name),
  );
  const ledgerBefore = await pool.query("SELECT id, name, applied_at FROM ledger_migration ORDER BY id");
  const second = await migrate(pool);
  assert.deepEqual(second.applied, []);
  const ledgerAfter = await pool.query("SELECT id, name, applied_at FROM ledger_migration ORDER BY id");
  assert.deepEqual(ledgerAfter.rows, ledgerBefore.rows, "no ledger row rewritten");
  assert.deepEqual(await missingTables(pool, LIKES_TABLES), []);

  // The template the suite clones from is already migrated: nothing to do there either.
  const cloned = await createTestDatabase();
  t.after(() => cloned.close());
  assert.deepEqual((await migrate(cloned.pool)).applied, []);
});

test("loadMigrations refuses a numbering gap or a duplicate number, and loads a contiguous set", async (t) => {
  const root = path.join(os.tmpdir(), `migrations-${randomBytes(6).toString("hex")}`);
  t.after(() => rm(root, { recursive: true, force: true }));
  async function dirWith(name: string, files: string[]): Promise<string> {
    const dir = path.join(root, name);
    await mkdir(dir, { recursive: true });
    for (const file of files) await writeFile(path.join(dir, file), `-- ${file}\nSELECT 1;\n`);
    return dir + path.sep;
  }
  await assert.rejects(
    loadMigrations(await dirWith("gap", ["001_a.sql", "003_c.sql"])),
    /gap or duplicate at 003_c\.sql/,
  );
  await assert.rejects(loadMigrations(await dirWith("late-start", ["002_b.sql"])), /gap or duplicate at 002_b\.sql/);
  await assert.rejects(
    loadMigrations(await dirWith("dup", ["001_a.sql", "001_b.sql", "002_c.sql"])),
    /gap or duplicate at 001_b\.sql/,
  );

  const good = await dirWith("good", ["001_a.sql", "002_b.sql", "README.md", "003_c.sql"]);
  const loaded = await loadMigrations(good);
  assert.deepEqual(
    loaded.map((m) => [m.id, m.name]),
    [
      [1, "001_a.sql"],
      [2, "002_b.sql"],
      [3, "003_c.sql"],
    ],
  );
  assert.equal(loaded[1]!.sql, "-- 002_b.sql\nSELECT 1;\n");
  // The directory argument works with or without a trailing separator.
  assert.deepEqual(
    (await loadMigrations(good.slice(0, -1))).map((m) => m.id),
    [1, 2, 3],
  );
});
