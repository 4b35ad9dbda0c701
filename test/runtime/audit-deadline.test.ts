/**
 * The periodic audit runs on the service's long pool (Database.longPool): its statements have the
 * audit period as their deadline, not a request's (LEDGER_PG_QUERY_TIMEOUT_MS). Cut off at a
 * request's deadline, the audit failed on every period of an hour's soak once the inboxes had
 * filled. The audit's first read is parked behind a lock on audit_cursor, observed in
 * pg_stat_activity; no timer is awaited.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { loadConfig } from "../../src/config.ts";
import { startService } from "../../src/runtime/service.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

interface Waiter {
  pid: number;
  ms: number;
}

/** The service's long-pool backend waiting for a lock, and how long its statement has run. */
async function longPoolWaiter(db: TestDatabase, pid?: number): Promise<Waiter | undefined> {
  const { rows } = await db.pool.query<Waiter>(
    `SELECT pid, (extract(epoch FROM clock_timestamp() - query_start) * 1000)::int AS ms FROM pg_stat_activity
      WHERE application_name = 'social-ledger-serve-long' AND wait_event_type = 'Lock' AND ($1::int IS NULL OR pid = $1)`,
    [pid ?? null],
  );
  return rows[0];
}

async function parkedAudit(t: TestContext, env: { queryTimeoutMs: number; auditEveryMs: number }) {
  const db = await createTestDatabase({ partitions: 2, poolSize: 3 });
  const config = loadConfig({
    DATABASE_URL: db.url,
    PORT: String(await freePort()),
    LEDGER_JWT_SECRET: randomBytes(32).toString("hex"),
    LEDGER_PG_QUERY_TIMEOUT_MS: String(env.queryTimeoutMs),
    LEDGER_AUDIT_EVERY_MS: String(env.auditEveryMs),
  });
  const holder = await db.pool.connect();
  await holder.query("BEGIN");
  await holder.query("LOCK TABLE audit_cursor IN ACCESS EXCLUSIVE MODE");
  const service = await startService(config, { logger: false, dashboard: { sampleMs: 100 } });
  t.after(async () => {
    await holder.query("ROLLBACK").catch(() => undefined);
    holder.release();
    await service.stop();
    await db.close();
  });
  const first = await pollUntil(
    "the periodic audit waits for audit_cursor",
    () => longPoolWaiter(db),
    (w) => !!w,
  );
  return { db, holder, first: first! };
}

const periodicRuns = async (db: TestDatabase) =>
  (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM feed_audit_run WHERE source = 'periodic'"))
    .rows[0]!.n;

test("the periodic audit's statement outlives a request's deadline (its deadline is the audit period) and the audit completes", async (t) => {
  const { db, holder, first } = await parkedAudit(t, { queryTimeoutMs: 300, auditEveryMs: 5000 });
  const still = await pollUntil(
    `audit backend ${first.pid} still waiting at four times the request deadline`,
    () => longPoolWaiter(db, first.pid),
    (w) => w === undefined || w.ms >= 1200,
    10_000,
  );
  assert.ok(still, `the audit's statement (backend ${first.pid}) was cut off before 1,200 ms`);
  assert.equal(await periodicRuns(db), 0);
  await holder.query("COMMIT");
  await pollUntil(
    "the periodic audit records its run",
    () => periodicRuns(db),
    (n) => n >= 1,
  );
});

test("negative control: with the audit period no longer than the request deadline, the same parked statement is cut off while the lock is held", async (t) => {
  const { db, first } = await parkedAudit(t, { queryTimeoutMs: 1000, auditEveryMs: 1000 });
  // The deadline destroys the connection; client_connection_check_interval then ends its backend.
  await pollUntil(
    `audit backend ${first.pid} gone while audit_cursor is still locked`,
    () => db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [first.pid]),
    (r) => r.rowCount === 0,
    15_000,
  );
  assert.equal(await periodicRuns(db), 0);
});
