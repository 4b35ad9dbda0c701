/**
 * The home timeline's consumers as `worker --transport nats` processes: a `relay --transport nats`
 * child publishes post_outbox and relation_event to a nats-server -js of the test's own, a worker
 * child applies them through the feed's durable consumers (feed-posts, feed-relations). The
 * worker is parked by the SQL hook point feed.consumer.afterFanOut in the middle of a post's
 * fan-out (its inbox rows written, uncommitted: seen in pg_locks) and killed -9 there. Its
 * transaction ends aborted and nothing of it is visible; posts, follows, unfollows and a deletion
 * go on while no worker runs; a new worker gets the unacknowledged messages again, and after the
 * drain every inbox equals the truth (feed_audit clean, and the fixture's independent
 * expectedRows). Negative control: one inbox row taken away is reported by the same audit.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { auditFeed, feedAuditClean } from "../../src/feed/feed-audit.ts";
import { FEED_AUTHOR_LOCK_SPACE } from "../../src/feed/feed-sources.ts";
import { openLedger } from "../../src/ledger.ts";
import { TestNats } from "../../support/nats-server.ts";
import { CliChild, childEnv, pollUntil, processAlive } from "../cli/cli-child.ts";
import { IS_HOOK_WAIT, SqlHook } from "../support/sql-hooks.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { expectedRows, inboxRows } from "./fixture.ts";

const PARTITIONS = 2;
const POINT = "feed.consumer.afterFanOut";
const READERS = Array.from({ length: 24 }, (_, i) => `r${String(i).padStart(2, "0")}`);
const AUTHORS = ["star", "mid", "low"];

interface LogLine {
  msg: string;
  consumer?: string;
  source?: string;
  applied?: number;
}

function batches(child: CliChild): LogLine[] {
  return child.lines.map((l) => JSON.parse(l) as LogLine).filter((l) => l.msg === "batch" && l.consumer === "feed");
}

test(
  "feed worker over JetStream: kill -9 in the middle of a fan-out, restart: every inbox equals the truth",
  { timeout: 240_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 6 });
    const nats = await TestNats.start();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-feed-nats-"));
    const env = childEnv({
      DATABASE_URL: db.url,
      LEDGER_DATA_DIR: dataDir,
      NATS_URL: nats.url,
      LOG_LEVEL: "info",
      LEDGER_NATS_ACK_WAIT_MS: "1000",
      LEDGER_GAP_CHECK_MS: "3000",
    });
    const children: CliChild[] = [];
    const start = (name: string, args: string[]) => {
      const url = new URL(db.url);
      url.searchParams.set("application_name", name);
      const child = new CliChild(name, args, { ...env, DATABASE_URL: url.toString() });
      children.push(child);
      return child;
    };
    const armed: SqlHook[] = [];
    t.after(async () => {
      for (const hook of armed) await hook.release();
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      for (const child of children)
        assert.equal(processAlive(child.pid), false, `${child.name} (pid ${child.pid}) is gone`);
      await nats.close();
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });

    const ledger = await openLedger(db.pool);
    for (const a of [...AUTHORS, ...READERS]) await ledger.relations.upsertAccount(a, { private: false });
    const feedLag = async () =>
      Number(
        (
          await db.pool.query<{ lag: string }>(
            `SELECT (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
                  + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part))
                  + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN proj_watermark w USING (part)) AS lag`,
          )
        ).rows[0]!.lag,
      );
    const drained = (what: string) => pollUntil(what, feedLag, (lag) => lag === 0, 90_000);
    const truthHolds = async (what: string) => {
      const audit = await auditFeed(db.pool, ledger.feed.maxItems);
      assert.ok(feedAuditClean(audit), `${what}: feed_audit clean ${JSON.stringify(audit)}`);
      assert.equal(audit.explainedByPending, 0, `${what}: nothing pending`);
      assert.deepEqual(await inboxRows(db.pool), await expectedRows(db.pool, ledger.feed.maxItems), what);
    };

    const relay = start("relay-1", ["relay", "--transport", "nats", "--batch-size", "20"]);
    const worker1 = start("worker-1", ["worker", "--transport", "nats", "--batch-size", "20"]);
    await Promise.all([relay.waitFor(/"msg":"leading/), worker1.waitFor(/"msg":"started"/)]);

    for (const r of READERS) await ledger.relations.follow(r, "star");
    for (const r of READERS.slice(0, 12)) await ledger.relations.follow(r, "mid");
    for (const a of AUTHORS) await ledger.posts.createPost(a, "PUBLIC", `${a}: first`);
    await drained("the follows and the first posts applied");
    await truthHolds("before the kill");
    assert.ok(
      batches(worker1).some((b) => b.source === "broker" && (b.applied ?? 0) > 0),
      "worker-1 applied feed events delivered by JetStream",
    );

    // Park worker-1's next fan-out at the hook point: its inbox rows are written, not committed.
    const watermarkBefore = (
      await db.pool.query<{ part: number; applied_upto: number }>(
        "SELECT part, applied_upto FROM feed_post_watermark ORDER BY part",
      )
    ).rows;
    const hook = await SqlHook.arm(db.pool, POINT);
    armed.push(hook);
    const post = await ledger.posts.createPost("star", "PUBLIC", "star: fanned out while the worker dies");
    type Parked = { pid: number; xid: string | null; inbox_lock: boolean; author_lock: boolean };
    const parked = await pollUntil(
      "worker-1 parked at feed.consumer.afterFanOut",
      async () =>
        (
          await db.pool.query<Parked>(
            `SELECT a.pid, a.backend_xid::text AS xid,
                    EXISTS (SELECT 1 FROM pg_locks k WHERE k.pid = a.pid AND k.granted AND k.mode = 'RowExclusiveLock'
                               AND k.relation = 'feed_inbox'::regclass) AS inbox_lock,
                    EXISTS (SELECT 1 FROM pg_locks k WHERE k.pid = a.pid AND k.granted AND k.locktype = 'advisory'
                               AND k.classid = $2::oid AND k.objid::bigint = (hashtext('star')::bigint & 4294967295)) AS author_lock
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE ${IS_HOOK_WAIT} AND NOT l.granted AND l.objid::bigint = (hashtext($1)::bigint & 4294967295)
                AND a.application_name = 'worker-1'`,
            [POINT, FEED_AUTHOR_LOCK_SPACE],
          )
        ).rows,
      (rows) => rows.length === 1,
      60_000,
    ).then((rows) => rows[0]!);
    assert.ok(parked.xid !== null, "the parked batch has written (it holds an xid)");
    assert.equal(parked.inbox_lock, true, "the parked batch has written feed_inbox rows");
    assert.equal(parked.author_lock, true, "the parked batch holds the author's lock: it is star's fan-out");
    assert.deepEqual(await worker1.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
    await hook.release();
    await pollUntil(
      "worker-1's backend gone",
      async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [parked.pid])).rowCount,
      (n) => n === 0,
      30_000,
    );
    const after = (
      await db.pool.query<{ status: string; rows: number }>(
        `SELECT pg_xact_status($1::text::xid8) AS status,
                (SELECT count(*) FROM feed_inbox WHERE post_id = $2)::int AS rows`,
        [parked.xid, post.postId],
      )
    ).rows[0]!;
    assert.deepEqual(after, { status: "aborted", rows: 0 }, "the fan-out in flight at the kill left nothing");
    assert.deepEqual(
      (
        await db.pool.query<{ part: number; applied_upto: number }>(
          "SELECT part, applied_upto FROM feed_post_watermark ORDER BY part",
        )
      ).rows,
      watermarkBefore,
      "no post watermark moved",
    );
    t.diagnostic(`note worker-1 killed -9 at ${POINT}: backend ${parked.pid}, transaction ${parked.xid} aborted`);

    // While no worker runs: posts, follows, unfollows and a deletion.
    for (const r of READERS.slice(12, 18)) await ledger.relations.follow(r, "low");
    for (const r of READERS.slice(0, 4)) await ledger.relations.unfollow(r, "star");
    const gone = await ledger.posts.createPost("mid", "PUBLIC", "mid: deleted before anyone applied it");
    await ledger.posts.deletePost("mid", gone.postId);
    for (const a of AUTHORS) await ledger.posts.createPost(a, "PUBLIC", `${a}: while no worker runs`);
    assert.ok((await feedLag()) > 0, "the feed lags with its worker dead");

    const worker2 = start("worker-2", ["worker", "--transport", "nats", "--batch-size", "20"]);
    await worker2.waitFor(/"msg":"started"/);
    await drained("worker-2 drained the feed");
    await truthHolds("after the kill and the restart");
    const reached = await db.pool.query<{ reader: string }>(
      "SELECT reader FROM feed_inbox WHERE post_id = $1 ORDER BY reader",
      [post.postId],
    );
    assert.deepEqual(
      reached.rows.map((r) => r.reader),
      [...READERS.slice(4), "star"],
      "the killed fan-out's post reached star and every follower still following",
    );
    const worker2Batches = batches(worker2);
    t.diagnostic(
      `note worker-2 feed batches: broker=${worker2Batches.filter((b) => b.source === "broker").length} outbox=${worker2Batches.filter((b) => b.source === "outbox").length}`,
    );
    assert.ok(
      worker2Batches.some((b) => (b.applied ?? 0) > 0),
      "worker-2 applied the events worker-1 never acknowledged",
    );

    // Negative control: the same audit sees an inbox that differs from the truth.
    await db.pool.query("DELETE FROM feed_inbox WHERE reader = $1 AND post_id = $2", [READERS[5], post.postId]);
    const broken = await auditFeed(db.pool, ledger.feed.maxItems);
    assert.equal(broken.missing, 1, `the audit sees the missing row: ${JSON.stringify(broken)}`);

    assert.deepEqual(await worker2.stop("SIGTERM"), { code: 0, signal: null }, worker2.stderr);
    assert.deepEqual(await relay.stop("SIGTERM"), { code: 0, signal: null }, relay.stderr);
  },
);
