/**
 * `npm test`: starts one embedded PostgreSQL 16 cluster on a free port, migrates a template
 * database once, then runs every test file under node's test runner; each file clones its
 * own database from the template (test/support/test-db.ts). Crash tests start clusters of
 * their own. Extra arguments select test files, e.g. `npm test -- test/likes/32-c*`.
 */
import { spawn } from "node:child_process";
import { readdir, rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { createPool } from "../src/db/pool.ts";
import { migrate } from "../src/db/migrate.ts";
import { TEMPLATE_DATABASE } from "../test/support/test-db.ts";

/**
 * Timeout for each test file, so that a test which waits forever fails instead of hanging
 * the suite. (Node 20 runs each file in its own process and applies --test-timeout to the
 * file as a whole.) Every wait inside a test has a deadline of its own (gates 30 s,
 * child-process lines 45 s, pg_locks polls 15 s), which gives the clear message; this is the
 * backstop. It is generous because files run two at a time on a 2-core machine shared with
 * other work: the slowest file, serve-kill, took about 50 s in a full run on that machine
 * (the crash tests 32-L and 30-beyond-2 and 32-J about 10-20 s), and 5 minutes leaves
 * several times that without letting a hang go unnoticed for long.
 */
const TEST_TIMEOUT_MS = 5 * 60_000;

async function findTests(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith(".test.ts"))
    .map((e) => path.join(e.parentPath, e.name))
    .sort();
}

const root = await clusterTempDir("social-ledger-test-");
const cluster = await EmbeddedCluster.start({
  dataDir: path.join(root, "pgdata"),
  settings: { max_connections: "400" },
});
let exitCode: number;
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query(`CREATE DATABASE ${TEMPLATE_DATABASE}`);
  await admin.end();
  const template = createPool({ connectionString: cluster.connectionString(TEMPLATE_DATABASE), max: 1 });
  await migrate(template);
  await template.end();

  const selected = process.argv.slice(2);
  const files = selected.length > 0 ? selected : await findTests("test");
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "--test",
      "--test-concurrency=2",
      `--test-timeout=${TEST_TIMEOUT_MS}`,
      "--test-reporter=spec",
      ...files,
    ],
    {
      stdio: "inherit",
      env: { ...process.env, LEDGER_TEST_PG_URL: cluster.connectionString("postgres") },
    },
  );
  exitCode = await new Promise<number>((resolve) =>
    child.on("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0))),
  );
} finally {
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
process.exit(exitCode);
