/**
 * The comment counter in worker processes, one killed -9 in the middle of a batch: two
 * `social-ledger worker` processes share this file's database (2 partitions), commenters write
 * and delete comments through the library. The test holds, uncommitted, the dedup key of the
 * next partition-0 comment event, so worker-A's batch waits inside its transaction (watermark
 * and count rows locked) until the kill; the batch must roll back. A replacement drains; the
 * count then equals the counted comments, every event was applied exactly once, audit clean.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { COMMENT_COUNTER } from "../../src/content/comment-spec.ts";
import { auditCounter, counterAuditClean, formatCounterAudit } from "../../src/counters/counter-audit.ts";
import { readCounter } from "../../src/counters/counter-reads.ts";
import { backendPid } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { stablePartition } from "../../src/partition.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { CliChild, childEnv, pollUntil, processAlive } from "./cli-child.ts";

const PARTITIONS = 2;
const WORKER_A_APP = "comment-worker-A";

test(
  "comment counter: kill -9 a worker process in the middle of a batch, replace it, drain: exact count, each event applied once",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 6 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-comment-workers-"));
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
    const users = Array.from({ length: 16 }, (_, i) => `cu${String(i).padStart(2, "0")}`);
    await db.pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[])", [users]);
    const ledger = await openLedger(db.pool);
    const post = await ledger.posts.createPost(users[0]!, "PUBLIC", "the post");
    assert.ok(
      users.some((u) => stablePartition(u, PARTITIONS) === 0),
      "some commenter writes to partition 0",
    );

    const urlA = new URL(db.url);
    urlA.searchParams.set("application_name", WORKER_A_APP);
    const workerA = new CliChild("worker-A", ["worker"], { ...env, DATABASE_URL: urlA.toString() });
    children.push(workerA);
    await workerA.waitFor(/"msg":"started"/);

    const live: string[][] = users.map(() => []);
    const round = async (n: number) => {
      await Promise.all(
        users.map(async (u, i) => {
          for (let k = 0; k < n; k++) {
            live[i]!.push((await ledger.comments.create(u, post.postId, `${u} #${k}`)).id);
            if (k % 3 === 2) await ledger.comments.delete(u, live[i]!.shift()!);
          }
        }),
      );
    };
    await round(6);
    type Mark = { last: number; watermark: number };
    const part0 = async () =>
      (
        await db.pool.query<Mark>(
          "SELECT s.last, w.applied_upto AS watermark FROM comment_seq s JOIN comment_watermark w USING (part) WHERE part = 0",
        )
      ).rows[0]!;
    const caughtUp = await pollUntil(
      "worker-A caught up on partition 0",
      part0,
      (m) => m.watermark === m.last && m.last > 0,
      30_000,
    );

    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("INSERT INTO comment_processed (part, seq, how) VALUES (0, $1, 'APPLIED')", [
        caughtUp.last + 1,
      ]);
      await round(3);
      const parked = await pollUntil(
        "worker-A's partition-0 comment batch waits for the held dedup key",
        async () =>
          (
            await db.pool.query<{ pid: number; xid: string | null }>(
              `SELECT pid, backend_xid::text AS xid FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY (pg_blocking_pids(pid))`,
              [WORKER_A_APP, backendPid(holder)],
            )
          ).rows,
        (rows) => rows.length === 1,
        30_000,
      ).then((rows) => rows[0]!);
      assert.ok(parked.xid !== null, "worker-A's batch has written (it holds an xid)");
      assert.deepEqual(await workerA.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
      await holder.query("ROLLBACK");
      await pollUntil(
        "worker-A's backend gone",
        async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [parked.pid])).rowCount,
        (n) => n === 0,
        15_000,
      );
      const {
        rows: [after],
      } = await db.pool.query<{ status: string; watermark: number; processed: number }>(
        `SELECT pg_xact_status($1::text::xid8) AS status, (SELECT applied_upto FROM comment_watermark WHERE part = 0) AS watermark,
              (SELECT count(*) FROM comment_processed WHERE part = 0 AND seq > $2)::int AS processed`,
        [parked.xid, caughtUp.last],
      );
      assert.deepEqual(
        after,
        { status: "aborted", watermark: caughtUp.watermark, processed: 0 },
        "the batch in flight at the kill left nothing",
      );
    } finally {
      holder.release(true);
    }

    await round(3);
    const workerA2 = new CliChild("worker-A2", ["worker"], env);
    children.push(workerA2);
    await workerA2.waitFor(/"msg":"started"/);
    await pollUntil(
      "comment counter caught up",
      () => readCounter(db.pool, COMMENT_COUNTER, post.postId, 0),
      (r) => r.lag === 0,
      30_000,
    );

    const expected = live.reduce((sum, ids) => sum + ids.length, 0);
    const reading = await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0);
    assert.deepEqual(reading, { n: expected, lag: 0, pending: 0, stale: false });
    const {
      rows: [exact],
    } = await db.pool.query<{ events: number; applied: number }>(
      "SELECT (SELECT count(*) FROM comment_outbox)::int AS events, (SELECT count(*) FROM comment_processed WHERE how = 'APPLIED')::int AS applied",
    );
    assert.equal(exact!.applied, exact!.events, "every comment event applied exactly once");
    const audit = await auditCounter(db.pool, COMMENT_COUNTER);
    t.diagnostic(`note ${exact!.events} events, count ${reading.n}; ${formatCounterAudit("comments", audit)}`);
    assert.ok(counterAuditClean(audit));
    assert.deepEqual(await workerA2.stop("SIGTERM"), { code: 0, signal: null }, workerA2.stderr);
  },
);
