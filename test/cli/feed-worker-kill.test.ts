/**
 * The home timeline consumer in a worker process, killed -9 in the middle of a fan-out: the test
 * holds one reader's feed_reader row, so the worker's post batch waits inside its transaction
 * (seen key written, author locked, readers being locked) until the kill; the batch must roll
 * back. A replacement drains; every inbox then equals the truth and the feed audit is clean.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { backendPid } from "../../src/db/pool.ts";
import { auditFeed, feedAuditClean, formatFeedAudit } from "../../src/feed/feed-audit.ts";
import { openLedger } from "../../src/ledger.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { expectedRows, inboxRows } from "../feed/fixture.ts";
import { CliChild, childEnv, pollUntil, processAlive } from "./cli-child.ts";

const WORKER_APP = "feed-worker-A";

test(
  "home timeline: kill -9 a worker in the middle of a fan-out, replace it, drain: every inbox equals the truth",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 6 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-feed-workers-"));
    const env = childEnv({
      DATABASE_URL: db.url,
      LEDGER_JWT_SECRET: "x".repeat(64),
      LEDGER_DATA_DIR: dataDir,
      LOG_LEVEL: "info",
    });
    const children: CliChild[] = [];
    t.after(async () => {
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      for (const child of children) assert.equal(processAlive(child.pid), false, `${child.name} is gone`);
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const users = Array.from({ length: 10 }, (_, i) => `fu${i}`);
    await db.pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[])", [users]);
    const ledger = await openLedger(db.pool);
    for (const u of users.slice(1)) await ledger.relations.follow(u, users[0]!);
    await ledger.posts.createPost(users[0]!, "PUBLIC", "first");

    const url = new URL(db.url);
    url.searchParams.set("application_name", WORKER_APP);
    const worker = new CliChild("worker-A", ["worker"], { ...env, DATABASE_URL: url.toString() });
    children.push(worker);
    await worker.waitFor(/"msg":"started"/);
    await pollUntil(
      "the feed caught up",
      () => auditFeed(db.pool, 800),
      (a) => a.lag === 0,
      30_000,
    );
    const watermark = async () =>
      (await db.pool.query<{ w: number }>("SELECT sum(applied_upto)::int AS w FROM feed_post_watermark")).rows[0]!.w;
    const before = await watermark();

    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM feed_reader WHERE reader = $1 FOR UPDATE", [users[5]]);
      await ledger.posts.createPost(users[0]!, "FOLLOWERS", "fanned out when the worker dies");
      const parked = await pollUntil(
        "the worker's fan-out waits for the held reader",
        async () =>
          (
            await db.pool.query<{ pid: number; xid: string | null }>(
              `SELECT pid, backend_xid::text AS xid FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY (pg_blocking_pids(pid))`,
              [WORKER_APP, backendPid(holder)],
            )
          ).rows,
        (rows) => rows.length === 1,
        30_000,
      ).then((rows) => rows[0]!);
      assert.ok(parked.xid !== null, "the fan-out has written (it holds an xid)");
      assert.deepEqual(await worker.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
      await holder.query("ROLLBACK");
      await pollUntil(
        "the worker's backend gone",
        async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [parked.pid])).rowCount,
        (n) => n === 0,
        15_000,
      );
      const { rows } = await db.pool.query<{ status: string }>("SELECT pg_xact_status($1::text::xid8) AS status", [
        parked.xid,
      ]);
      assert.equal(rows[0]!.status, "aborted");
      assert.equal(await watermark(), before, "the batch in flight at the kill left nothing");
    } finally {
      holder.release(true);
    }

    await ledger.relations.unfollow(users[3]!, users[0]!);
    const replacement = new CliChild("worker-A2", ["worker"], env);
    children.push(replacement);
    await replacement.waitFor(/"msg":"started"/);
    const audit = await pollUntil(
      "the feed caught up again",
      () => auditFeed(db.pool, 800),
      (a) => a.lag === 0,
      30_000,
    );
    assert.ok(feedAuditClean(audit), formatFeedAudit(audit));
    assert.deepEqual(await inboxRows(db.pool), await expectedRows(db.pool, 800));
  },
);
