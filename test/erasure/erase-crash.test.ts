/**
 * `social-ledger erase` as a real child process, killed -9 in the middle of an erasure, then run
 * again: the erasure resumes from its last committed batch and ends with every count exact and
 * the audit clean. The kill point is deterministic: the SQL hook point erasure.beforeCommit.likes
 * (inside erasure_step, before its transaction commits) is armed, so the child's first batch of
 * the likes phase parks there after the posts, comments and their likes are done. The child's
 * connections check their client every 50 ms (client_connection_check_interval), so its backend
 * notices the dead process and rolls the parked batch back. Everything is checked with SQL of
 * the test's own, against figures taken before the erasure.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { HOOK_LOCK_CLASS, SqlHook } from "../support/sql-hooks.ts";
import { CliChild, childEnv, processAlive, runCli } from "../cli/cli-child.ts";
import { pollUntil } from "../../support/poll.ts";
import { buildWorld, drain, nonZero, readCounts } from "./fixture.ts";

const POINT = "erasure.beforeCommit.likes";

test(
  "erase: kill -9 inside a batch, run it again: it resumes from the last committed batch; counts exact, audit clean",
  { timeout: 120_000 },
  async (t) => {
    const w = await buildWorld({ partitions: 4 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-erase-"));
    t.after(async () => {
      await w.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    // 30 more likes of eve, so the likes phase has batches before and after the kill.
    for (let i = 0; i < 30; i++) {
      await w.ledger.likes.createItem(`extra-${i}`);
      await w.ledger.likes.like("eve", `extra-${i}`);
      await w.ledger.likes.like("carl", `extra-${i}`);
    }
    await drain(w.ledger);
    const before = await readCounts(w.db);
    const url = new URL(w.db.url);
    url.searchParams.set("options", "-c client_connection_check_interval=50ms");
    url.searchParams.set("application_name", "erase-child");
    const env = childEnv({ DATABASE_URL: url.toString(), LEDGER_DATA_DIR: dataDir, LOG_LEVEL: "warn" });

    const hook = await SqlHook.arm(w.db.pool, POINT);
    t.after(() => hook.release());
    const child = new CliChild("erase", ["erase", "eve", "--batch-size", "4"], env);
    t.after(async () => {
      if (child.alive()) await child.stop("SIGKILL");
    });
    const parked = await pollUntil(
      "the erase child parked at " + POINT,
      async () =>
        (
          await w.db.pool.query<{ pid: number }>(
            `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND NOT l.granted AND l.objid::bigint = (hashtext($2)::bigint & 4294967295)
        AND a.application_name = 'erase-child'`,
            [HOOK_LOCK_CLASS, POINT],
          )
        ).rows[0]?.pid,
      (pid) => pid !== undefined,
    );
    // What the committed batches did: the phases before likes are done, likes not begun.
    const committed = (
      await w.db.pool.query("SELECT phase, done, cursor_id FROM account_erasure WHERE account_id = 'eve'")
    ).rows[0];
    assert.deepEqual(committed, { phase: "likes", done: 3 + 3 + 5 + 2, cursor_id: null });

    await child.stop("SIGKILL");
    assert.equal(processAlive(child.pid), false);
    await pollUntil(
      "the killed child's backend ended",
      async () =>
        (await w.db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1", [parked])).rows[0]!.n,
      (n) => n === 0,
    );
    await hook.release();
    // The parked batch rolled back: nothing of the likes phase is in the facts or the outbox.
    const {
      rows: [after],
    } = await w.db.pool.query(`SELECT
      (SELECT phase FROM account_erasure WHERE account_id = 'eve') AS phase,
      (SELECT done FROM account_erasure WHERE account_id = 'eve')::int AS done,
      (SELECT count(*) FROM like_fact WHERE user_id = 'eve' AND liked)::int AS eve_likes,
      (SELECT count(*) FROM like_outbox WHERE user_id = 'eve' AND delta = -1)::int AS eve_unlike_events`);
    // eve's one like of her own post went with the post_likes phase.
    assert.deepEqual(after, { phase: "likes", done: 13, eve_likes: 33, eve_unlike_events: 1 });

    // Run it again: it resumes the running erasure and finishes it.
    const resumed = await runCli(["erase", "eve", "--batch-size", "4", "--json"], env);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.match(resumed.stderr, /resuming the running erasure/);
    const status = JSON.parse(resumed.stdout) as { phase: string; done: number; remaining: number };
    assert.deepEqual(
      { phase: status.phase, done: status.done, remaining: status.remaining },
      { phase: "done", done: 23 + 30, remaining: 0 },
    );
    // And a third time: already erased, nothing written.
    const again = await runCli(["erase", "eve", "--json"], env);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already erased/);
    const unknown = await runCli(["erase", "nobody"], env);
    assert.equal(unknown.code, 2);
    assert.equal(unknown.stderr, "social-ledger erase: unknown account: nobody\n");

    await drain(w.ledger);
    const counts = await readCounts(w.db);
    const extra = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`extra-${i}`, 1]));
    for (let i = 0; i < 30; i++) assert.equal(counts.likes[`extra-${i}`], 1, `extra-${i}: carl's like only`);
    assert.equal(Object.keys(extra).length, 30);
    // Every like count is its facts, by independent SQL; and every one eve gave is gone.
    const {
      rows: [check],
    } = await w.db.pool.query(`SELECT
      (SELECT count(*) FROM (SELECT item_id, sum(n) AS n FROM like_count GROUP BY item_id) c
         FULL JOIN (SELECT item_id, count(*) AS n FROM like_fact WHERE liked GROUP BY item_id) f USING (item_id)
        WHERE coalesce(c.n, 0) <> coalesce(f.n, 0))::int AS like_mismatch,
      (SELECT count(*) FROM like_outbox WHERE user_id = 'eve' AND delta = -1)::int AS eve_unlike_events,
      (SELECT count(*) FROM like_outbox WHERE created_at >= (SELECT started_at FROM account_erasure WHERE account_id = 'eve') AND delta = -1)::int AS erasure_unlikes,
      (SELECT sum(n) FROM like_count)::int AS like_total`);
    const beforeTotal = Object.values(before.likes).reduce((a, b) => a + b, 0);
    assert.deepEqual(check, {
      like_mismatch: 0,
      eve_unlike_events: 34,
      erasure_unlikes: 5 + 2 + 33,
      like_total: beforeTotal - 40,
    });
    // eve's block; the one made against her stays (its blocker's).
    assert.equal(nonZero(counts).blocks, before.blocks - 1);
    const audit = await fullAudit(w.ledger);
    assert.equal(audit.clean, true, JSON.stringify(audit));
    const cliAudit = await runCli(["audit"], env);
    assert.equal(cliAudit.code, 0, cliAudit.stdout + cliAudit.stderr);
  },
);
