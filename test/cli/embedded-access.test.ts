/**
 * Who can use the service's embedded PostgreSQL and read its data directory.
 * `serve` runs as a child process on a data directory of the test's own: a fresh one, and one
 * made the way the service made it before (superuser postgres/postgres, the migrations run
 * as that superuser, the port file and the server's log 0644, the directory 0755). Every
 * connection here is a real login over TCP to the cluster that serve started.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { chmod, chown, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { EmbeddedCluster, clusterTempDir, freePort, postgresOsUser } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import {
  APP_PASSWORD_FILE,
  APP_ROLE,
  SUPERUSER_PASSWORD_FILE,
  embeddedSuperuserUrl,
  embeddedUrl,
} from "../../src/runtime/embedded-access.ts";
import { SERVICE_PARTITIONS_OF_NEW } from "../../src/runtime/database.ts";
import { CliChild, childEnv, httpClient, pollUntil, postmasterPid, processAlive, runCli } from "./cli-child.ts";
import { serveLab } from "./serve-lab.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const SECURED = /"msg":"secured the embedded PostgreSQL"/;
const PRIVATE_FILES = [
  "jwt-secret",
  SUPERUSER_PASSWORD_FILE,
  APP_PASSWORD_FILE,
  "pg-port",
  "postgresql.log",
  "owner.pid",
];
const asRoot = process.getuid?.() === 0;

async function embeddedPort(dataDir: string): Promise<number> {
  return Number((await readFile(path.join(dataDir, "pg-port"), "utf8")).trim());
}

async function appUrl(dataDir: string): Promise<string> {
  return embeddedUrl(
    await embeddedPort(dataDir),
    APP_ROLE,
    (await readFile(path.join(dataDir, APP_PASSWORD_FILE), "utf8")).trim(),
  );
}

async function withClient<T>(url: string, body: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await body(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The SQLSTATE of a failed login (or undefined when the login succeeds). */
async function loginError(url: string): Promise<string | undefined> {
  try {
    await withClient(url, async () => undefined);
    return undefined;
  } catch (err) {
    return (err as { code?: string }).code ?? (err as Error).message;
  }
}

function mode(file: string): string {
  return (statSync(file).mode & 0o777).toString(8).padStart(4, "0");
}

/**
 * What the old code made: initdb with superuser postgres / postgres (EmbeddedCluster's default
 * password), the migrations and initLedger run as that superuser, the port file and the log of
 * the default mode, the directory 0755; one like of alice on item x, still to be counted.
 */
async function oldStyleDataDir(dataDir: string, options: { preparedTransactions?: boolean } = {}): Promise<void> {
  const port = await freePort();
  await writeFile(path.join(dataDir, "pg-port"), `${port}\n`);
  await writeFile(path.join(dataDir, "jwt-secret"), `${"s".repeat(43)}\n`, { mode: 0o600 });
  await writeFile(path.join(dataDir, "postgresql.log"), "a line of the old server's log\n");
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(dataDir, "pg"), port });
  const pool = createPool({ connectionString: cluster.connectionString(), max: 2 });
  try {
    await migrate(pool);
    await initLedger(pool, { partitionsOfNew: SERVICE_PARTITIONS_OF_NEW });
    const ledger = await openLedger(pool);
    await ledger.likes.createItem("x");
    await ledger.likes.like("alice", "x");
    if (options.preparedTransactions) await pool.query("ALTER SYSTEM SET max_prepared_transactions = 2");
  } finally {
    await pool.end();
    await cluster.stop();
  }
  for (const file of ["pg-port", "postgresql.log"]) await chmod(path.join(dataDir, file), 0o644);
  await chmod(dataDir, 0o755);
}

/**
 * The locked state, checked through real logins: what every test of this file ends in.
 * `serviceAsRoot`: whether serve ran as root (so the server as the OS user postgres).
 */
async function assertLocked(t: TestContext, dataDir: string, serviceAsRoot = asRoot): Promise<void> {
  const port = await embeddedPort(dataDir);
  assert.equal(await loginError(embeddedUrl(port, "postgres", "postgres")), "28P01", "postgres / postgres is refused");
  await withClient(await embeddedSuperuserUrl(dataDir, port), async (superuser) => {
    const hba = await superuser.query<{ type: string; auth_method: string }>(
      "SELECT type, auth_method FROM pg_hba_file_rules",
    );
    assert.ok(
      hba.rows.some((r) => r.type === "host"),
      "TCP logins are configured",
    );
    assert.deepEqual(
      [...new Set(hba.rows.map((r) => r.auth_method))],
      ["scram-sha-256"],
      "every line of pg_hba asks for a password",
    );
    const role = await superuser.query(
      "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1",
      [APP_ROLE],
    );
    assert.deepEqual(role.rows, [
      {
        rolcanlogin: true,
        rolsuper: false,
        rolcreatedb: false,
        rolcreaterole: false,
        rolreplication: false,
        rolbypassrls: false,
      },
    ]);
    const foreign = await superuser.query<{ name: string; owner: string }>(
      `SELECT c.oid::regclass::text AS name, pg_get_userbyid(c.relowner) AS owner FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relowner <> $1::regrole
       UNION ALL SELECT p.oid::regprocedure::text, pg_get_userbyid(p.proowner) FROM pg_proc p
        WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> $1::regrole
       UNION ALL SELECT nspname::text, pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'public' AND nspowner <> $1::regrole`,
      [APP_ROLE],
    );
    assert.deepEqual(foreign.rows, [], `${APP_ROLE} owns the schema and everything in it`);
    // The service's own sessions (its pool, application_name social-ledger-serve) log in as that role.
    const sessions = await pollUntil(
      "serve's sessions",
      async () =>
        (
          await superuser.query<{ usename: string }>(
            "SELECT DISTINCT usename::text FROM pg_stat_activity WHERE application_name = 'social-ledger-serve'",
          )
        ).rows,
      (rows) => rows.length > 0,
      20_000,
    );
    assert.deepEqual(
      sessions.map((r) => r.usename),
      [APP_ROLE],
    );
    // Control: the statement below is valid, and only a superuser (or pg_execute_server_program) may run it.
    await superuser.query("COPY (SELECT 1) TO PROGRAM 'cat > /dev/null'");
  });
  await withClient(await appUrl(dataDir), async (app) => {
    const me = await app.query(
      "SELECT current_user::text AS name, rolsuper FROM pg_roles WHERE rolname = current_user",
    );
    assert.deepEqual(me.rows, [{ name: APP_ROLE, rolsuper: false }]);
    await assert.rejects(
      app.query("COPY (SELECT 1) TO PROGRAM 'cat > /dev/null'"),
      (err: { code?: string; message: string }) => {
        assert.equal(err.code, "42501", err.message);
        assert.match(err.message, /permission denied/);
        return true;
      },
    );
  });
  for (const name of PRIVATE_FILES) assert.equal(mode(path.join(dataDir, name)), "0600", name);
  assert.equal(mode(path.join(dataDir, "pg")), "0700", "pg/ (initdb's own mode)");
  if (serviceAsRoot) {
    const server = postgresOsUser()!;
    assert.equal(mode(dataDir), "0710", "the data directory: its owner, and the group postgres may only pass through");
    assert.equal(statSync(dataDir).gid, server.gid);
    // Real attempts as other users: nobody cannot enter the directory; postgres, the server's user, reads none of our files.
    for (const [user, args] of [
      ["nobody", ["ls", dataDir]],
      ["nobody", ["cat", path.join(dataDir, "pg-port")]],
      ["postgres", ["ls", dataDir]],
      ...PRIVATE_FILES.map((name) => ["postgres", ["cat", path.join(dataDir, name)]] as const),
    ] as const) {
      const attempt = spawnSync("runuser", ["-u", user, "--", ...args], { encoding: "utf8" });
      assert.notEqual(attempt.status, 0, `${user}: ${args.join(" ")} must fail`);
      assert.match(attempt.stderr, /Permission denied/, `${user}: ${args.join(" ")}`);
    }
    // Control: the same command as postgres reaches what it must reach.
    assert.equal(
      spawnSync("runuser", ["-u", "postgres", "--", "cat", path.join(dataDir, "pg", "PG_VERSION")], {
        encoding: "utf8",
      }).stdout.trim(),
      "16",
    );
  } else {
    assert.equal(mode(dataDir), "0700", "the data directory: its owner's alone (the server runs as that user)");
    assert.equal(mode(path.join(dataDir, "pg")), "0700");
    if (!asRoot) {
      t.diagnostic("not root: the other-user attempts need runuser as root and are skipped");
      return;
    }
    for (const args of [
      ["ls", dataDir],
      ["cat", path.join(dataDir, "pg-port")],
    ]) {
      const attempt = spawnSync("runuser", ["-u", "nobody", "--", ...args], { encoding: "utf8" });
      assert.notEqual(attempt.status, 0, `nobody: ${args.join(" ")} must fail`);
      assert.match(attempt.stderr, /Permission denied/, `nobody: ${args.join(" ")}`);
    }
  }
}

test(
  "embedded access: serve on a fresh data directory: postgres/postgres is refused, the service runs as ledger_app (no superuser, no COPY TO PROGRAM), every file is private",
  { timeout: 180_000 },
  async (t) => {
    const { dataDir, serve } = await serveLab(t, "ledger-access-fresh-", { LOG_LEVEL: "info" });
    const server = serve("serve");
    await server.waitFor(LISTENING, 90_000);
    await assertLocked(t, dataDir);
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
  },
);

test(
  "embedded access: a data directory made before the fix is locked down at the next start and keeps its data; the start after that changes nothing",
  { timeout: 180_000 },
  async (t) => {
    const { dataDir, env, serve } = await serveLab(t, "ledger-access-upgrade-", { LOG_LEVEL: "info" });
    await oldStyleDataDir(dataDir);
    const port = await embeddedPort(dataDir);

    const server1 = serve("serve#1");
    const address = LISTENING.exec(await server1.waitFor(LISTENING, 90_000))![1]!;
    await assertLocked(t, dataDir);
    const secured = JSON.parse(await server1.waitFor(SECURED)) as { database: { changes: string[] } };
    assert.deepEqual(secured.database.changes, [
      `created role ${APP_ROLE}`,
      `gave ${APP_ROLE} the schema public and its objects`,
      "replaced the default password of postgres",
    ]);

    // The like made before is counted by the service's consumer, now writing as ledger_app, and a new one is taken.
    const http = httpClient(address);
    const countOf = async () =>
      (await http<{ count: number; stale: boolean }>("GET", "/v1/items/x/like-count?allowedLag=0")).body;
    await pollUntil("alice's old like counted", countOf, (c) => c.count === 1 && !c.stale, 20_000);
    const bob = await runCli(["token", "bob"], env);
    assert.equal(bob.code, 0, bob.stderr);
    assert.equal((await http("PUT", "/v1/items/x/likes/me", bob.stdout.trim())).status, 200);
    await pollUntil("bob's like counted", countOf, (c) => c.count === 2 && !c.stale, 20_000);
    assert.deepEqual(await server1.stop("SIGTERM"), { code: 0, signal: null }, server1.stderr);

    const passwords = await Promise.all(
      [SUPERUSER_PASSWORD_FILE, APP_PASSWORD_FILE].map((name) => readFile(path.join(dataDir, name), "utf8")),
    );
    const server2 = serve("serve#2");
    await server2.waitFor(LISTENING, 90_000);
    assert.equal(
      server2.lines.filter((line) => SECURED.test(line)).length,
      0,
      "the second start had nothing to secure",
    );
    assert.deepEqual(
      await Promise.all(
        [SUPERUSER_PASSWORD_FILE, APP_PASSWORD_FILE].map((name) => readFile(path.join(dataDir, name), "utf8")),
      ),
      passwords,
    );
    assert.equal(await embeddedPort(dataDir), port, "the cluster keeps its port");
    const count = await countOf();
    assert.equal(count.count, 2, "both likes are still counted");
    await assertLocked(t, dataDir);
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
  },
);

test(
  "embedded access: serve killed in the middle of locking an old data directory leaves it as it was, and the next start finishes the job",
  { timeout: 180_000 },
  async (t) => {
    const { dataDir, serve } = await serveLab(t, "ledger-access-crash-", { LOG_LEVEL: "info" });
    await oldStyleDataDir(dataDir, { preparedTransactions: true });
    const port = await embeddedPort(dataDir);
    const oldSuperuser = embeddedUrl(port, "postgres", "postgres");
    // A prepared transaction (it outlives its session and the server) holds a lock on like_count,
    // so the transaction that hands like_count to ledger_app waits there, halfway through.
    const holder = await EmbeddedCluster.start({ dataDir: path.join(dataDir, "pg"), port });
    await withClient(holder.connectionString(), async (c) => {
      await c.query("BEGIN");
      await c.query("LOCK TABLE like_count IN ACCESS SHARE MODE");
      await c.query("PREPARE TRANSACTION 'hold-like-count'");
    });
    await holder.stop();

    const server1 = serve("serve#1");
    const waiting = await pollUntil(
      "the setup transaction waits on like_count",
      () =>
        withClient(
          oldSuperuser,
          async (c) =>
            (
              await c.query<{ relation: string; mode: string }>(
                `SELECT l.relation::regclass::text AS relation, l.mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE NOT l.granted AND a.application_name = 'social-ledger-setup'`,
              )
            ).rows,
        ).catch(() => []),
      (rows) => rows.length > 0,
      60_000,
    );
    assert.deepEqual(waiting, [{ relation: "like_count", mode: "AccessExclusiveLock" }]);
    await server1.stop("SIGKILL");

    // Killed halfway: nothing of it committed, the old password still works and no role exists.
    await withClient(oldSuperuser, async (c) => {
      assert.deepEqual((await c.query("SELECT rolname FROM pg_roles WHERE rolname = $1", [APP_ROLE])).rows, []);
      await c.query("ROLLBACK PREPARED 'hold-like-count'");
    });

    const server2 = serve("serve#2");
    await server2.waitFor(LISTENING, 90_000);
    const secured = JSON.parse(await server2.waitFor(SECURED)) as { database: { changes: string[] } };
    assert.ok(
      secured.database.changes.includes("replaced the default password of postgres"),
      secured.database.changes.join("; "),
    );
    await assertLocked(t, dataDir);
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
  },
);

test(
  "embedded access: serve run by a user other than root runs its PostgreSQL as that user, in a 0700 data directory, locked the same way",
  { timeout: 180_000 },
  async (t) => {
    if (!asRoot) {
      t.skip("starting serve as another user needs root (the tests above run as this user)");
      return;
    }
    const user = postgresOsUser({ create: true })!;
    const root = await clusterTempDir("ledger-access-user-");
    const dataDir = path.join(root, "data");
    await mkdir(dataDir);
    await chown(dataDir, user.uid, user.gid);
    const server = new CliChild(
      "serve as postgres",
      ["serve"],
      childEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(await freePort()), LOG_LEVEL: "info" }),
      user,
    );
    t.after(async () => {
      if (server.alive()) await server.stop("SIGKILL");
      const pgPid = postmasterPid(path.join(dataDir, "pg"));
      if (pgPid !== undefined && processAlive(pgPid)) process.kill(pgPid, "SIGQUIT");
      await rm(root, { recursive: true, force: true });
    });
    await server.waitFor(LISTENING, 90_000);
    assert.equal(statSync(path.join(dataDir, "pg")).uid, user.uid, "initdb ran as serve's own user");
    for (const name of PRIVATE_FILES) assert.equal(statSync(path.join(dataDir, name)).uid, user.uid, name);
    await assertLocked(t, dataDir, false);
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
  },
);
