/**
 * The transport as real processes: `social-ledger relay --transport nats` and `social-ledger worker
 * --transport nats` children against this file's database and a nats-server -js of its own (free
 * port, temporary store). While the test writes likes, follows and comments through the library:
 *  1. the relay is killed -9 after JetStream acknowledged a batch and before it recorded its progress
 *     (the test holds the relay_watermark row, so the relay's UPDATE waits); the next relay
 *     re-publishes that range and JetStream's duplicate window drops the copies;
 *  2. a worker is killed -9 inside a batch transaction (the test holds the next dedup key uncommitted,
 *     so the batch waits inside its transaction); the transaction ends aborted, the unacknowledged
 *     messages are redelivered after ack_wait to the other worker;
 *  3. nats-server is killed -9 and restarted on the same store; relay and workers reconnect.
 * Throughout, the lag is sampled and must stay within one phase of writes; afterwards every watermark
 * is at its last seq with every dedup key present (contiguous), the audits are clean and the counts
 * equal the facts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { backendPid } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { CliChild, childEnv, processAlive, runCli } from "../cli/cli-child.ts";
import { assertConverged, assertDedupKeysComplete, setUp, totalLag, writeSome, USERS, ITEMS } from "./workload.ts";

const PARTITIONS = 2;
/** Writes per phase; lag may grow by at most about one phase while a component is down. */
const PHASE = 60;

interface LogLine {
  msg: string;
  kind?: string;
  part?: number;
  stored?: number;
  duplicates?: number;
  source?: string;
}

function parsed(child: CliChild): LogLine[] {
  return child.lines.flatMap((l) => {
    try {
      return [JSON.parse(l) as LogLine];
    } catch {
      return [];
    }
  });
}

test(
  "relay and workers as processes: kill -9 of the relay mid-publish and of a worker mid-batch, nats-server restarted: counts equal the facts, watermarks contiguous, lag bounded",
  { timeout: 240_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 8 });
    const nats = await TestNats.start();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-nats-crash-"));
    const env = childEnv({
      DATABASE_URL: db.url,
      LEDGER_DATA_DIR: dataDir,
      NATS_URL: nats.url,
      LOG_LEVEL: "info",
      LEDGER_NATS_ACK_WAIT_MS: "1000",
      LEDGER_GAP_CHECK_MS: "3000",
    });
    const children: CliChild[] = [];
    const withApp = (app: string) => {
      const url = new URL(db.url);
      url.searchParams.set("application_name", app);
      return { ...env, DATABASE_URL: url.toString() };
    };
    const start = (name: string, args: string[]) => {
      const child = new CliChild(name, args, withApp(name));
      children.push(child);
      return child;
    };
    let sampling = true;
    let maxLag = 0;
    let sampler: Promise<void> = Promise.resolve();
    t.after(async () => {
      sampling = false;
      await sampler;
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      for (const child of children)
        assert.equal(processAlive(child.pid), false, `${child.name} (pid ${child.pid}) is gone`);
      await nats.close();
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });

    const ledger = await openLedger(db.pool);
    const w = await setUp(ledger);
    const relay1 = start("relay-1", ["relay", "--transport", "nats", "--batch-size", "20"]);
    const worker1 = start("worker-1", ["worker", "--transport", "nats", "--batch-size", "20"]);
    const worker2 = start("worker-2", ["worker", "--transport", "nats", "--batch-size", "20", "--partitions", "1"]);
    await Promise.all([
      relay1.waitFor(/"msg":"leading/),
      worker1.waitFor(/"msg":"started"/),
      worker2.waitFor(/"msg":"started"/),
    ]);
    sampler = (async () => {
      while (sampling) {
        maxLag = Math.max(maxLag, await totalLag(db.pool).catch(() => 0));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const drained = (what: string) =>
      pollUntil(
        what,
        () => totalLag(db.pool),
        (lag) => lag === 0,
        60_000,
      );

    let seed = 1;
    await writeSome(ledger, w, PHASE, seed++);
    await drained("phase 1 drained");

    // 1. The relay, killed -9 between JetStream's acks and its progress row.
    const holder = await db.pool.connect();
    let heldAt: number;
    try {
      await holder.query("BEGIN");
      heldAt = (
        await holder.query<{ published_upto: string }>(
          "SELECT published_upto FROM relay_watermark WHERE kind = 'likes' AND part = 0 FOR UPDATE",
        )
      ).rows[0]!.published_upto as unknown as number;
      heldAt = Number(heldAt);
      for (const u of USERS) for (const item of ITEMS.slice(0, 2)) await ledger.likes.like(u, item);
      const blocked = await pollUntil(
        "relay-1 waits to record likes/0",
        async () =>
          (
            await db.pool.query<{ pid: number }>(
              "SELECT pid FROM pg_stat_activity WHERE application_name = 'relay-1' AND $1 = ANY (pg_blocking_pids(pid))",
              [backendPid(holder)],
            )
          ).rows,
        (rows) => rows.length === 1,
        30_000,
      );
      // Published and delivered, not recorded: the workers apply events the relay has not recorded yet.
      const appliedPastHeld = await pollUntil(
        "events past the held watermark applied",
        async () =>
          Number(
            (await db.pool.query<{ a: string }>("SELECT applied_upto AS a FROM counter_watermark WHERE part = 0"))
              .rows[0]!.a,
          ),
        (a) => a > heldAt,
        30_000,
      );
      const killed = await relay1.stop("SIGKILL");
      assert.deepEqual(killed, { code: null, signal: "SIGKILL" });
      // Its UPDATE had already reached the server and would commit once we let go (an autocommit
      // statement commits before it answers the dead client). End that backend too: the progress row
      // stays where it was, the case in which the next relay re-publishes.
      await db.pool.query("SELECT pg_terminate_backend($1)", [blocked[0]!.pid]);
      t.diagnostic(
        `note relay-1 killed -9 with likes/0 published to ${appliedPastHeld} (at least), recorded ${heldAt}; its backend ${blocked[0]!.pid} waited on the row`,
      );
      await holder.query("ROLLBACK");
    } finally {
      holder.release(true);
    }
    const relay2 = start("relay-2", ["relay", "--transport", "nats", "--batch-size", "20"]);
    await relay2.waitFor(/"msg":"leading/);
    const republished = await relay2.waitFor(/"kind":"likes","part":0,.*"msg":"published"/);
    const first = JSON.parse(republished) as LogLine;
    assert.ok(
      (first.duplicates ?? 0) > 0,
      `relay-2 re-published the unrecorded range and JetStream dropped the copies: ${republished}`,
    );
    t.diagnostic(
      `note relay-2's first likes/0 batch: stored=${first.stored} dropped as duplicates=${first.duplicates}`,
    );
    await writeSome(ledger, w, PHASE, seed++);
    await drained("after the relay crash");

    // 2. A worker, killed -9 inside a likes/1 batch transaction (both workers serve partition 1).
    type Backend = { pid: number; app: string; xid: string | null };
    const keyHolder = await db.pool.connect();
    let parked: Backend;
    try {
      const last = Number(
        (await db.pool.query<{ last: string }>("SELECT last FROM like_seq WHERE part = 1")).rows[0]!.last,
      );
      await keyHolder.query("BEGIN");
      await keyHolder.query("INSERT INTO processed_event (part, seq, how) VALUES (1, $1, 'APPLIED')", [last + 1]);
      const writes = writeSome(ledger, w, PHASE, seed++);
      parked = (
        await pollUntil(
          "a worker's likes/1 batch waits for the held key",
          async () =>
            (
              await db.pool.query<Backend>(
                `SELECT pid, application_name AS app, backend_xid::text AS xid FROM pg_stat_activity
        WHERE application_name LIKE 'worker-%' AND $1 = ANY (pg_blocking_pids(pid))`,
                [backendPid(keyHolder)],
              )
            ).rows,
          (rows) => rows.length === 1,
          30_000,
        )
      )[0]!;
      const victim = children.find((c) => c.name === parked.app)!;
      assert.deepEqual(await victim.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
      await keyHolder.query("ROLLBACK");
      await writes;
    } finally {
      keyHolder.release(true);
    }
    await pollUntil(
      "the killed worker's backend gone",
      async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [parked.pid])).rowCount,
      (n) => n === 0,
      15_000,
    );
    // A batch blocked on its first write (the held key) has no xid yet: it wrote nothing, so there is
    // nothing it could have committed; one blocked after a write must show as aborted.
    const status =
      parked.xid === null
        ? "no xid: nothing written"
        : (await db.pool.query<{ s: string }>("SELECT pg_xact_status($1::text::xid8) AS s", [parked.xid])).rows[0]!.s;
    assert.ok(
      parked.xid === null || status === "aborted",
      `the batch transaction of ${parked.app} (xid ${parked.xid}) never committed: ${status}`,
    );
    t.diagnostic(
      `note ${parked.app} killed -9 inside a likes/1 batch (backend ${parked.pid}, xid ${parked.xid}: ${status})`,
    );
    // The survivor gets the unacknowledged messages again after ack_wait; a replacement takes over what only the victim served.
    const worker3 = start("worker-3", ["worker", "--transport", "nats", "--batch-size", "20"]);
    await worker3.waitFor(/"msg":"started"/);
    await drained("after the worker crash");

    // 3. nats-server killed -9 while writes go on, restarted on the same store.
    const linesBeforeRestart = new Map(children.map((c) => [c.name, c.lines.length]));
    const fills = () => children.flatMap(parsed).filter((l) => l.msg === "batch" && l.source === "outbox").length;
    const fillsBeforeRestart = fills();
    await nats.stop("SIGKILL");
    await writeSome(ledger, w, PHASE, seed++);
    await nats.restart();
    await writeSome(ledger, w, PHASE / 2, seed);
    await drained("after the broker restart");
    const brokerBatchesSinceRestart = () =>
      children
        .filter((c) => c.alive() && c.name.startsWith("worker"))
        .flatMap((c) => {
          const lines = parsed(c).slice(linesBeforeRestart.get(c.name) ?? 0);
          return lines.filter((l) => l.msg === "batch" && l.source === "broker");
        });
    // The gap filler may have taken what was written while the broker was down (it also lost what it
    // had not written to disk); the workers must pull from the broker again: a few more writes until one
    // arrives through it (each pass writes, so the poll is the workload, not a wait for time).
    let extraSeed = 100;
    const afterRestart = await pollUntil(
      "the workers consume from the broker again",
      async () => {
        if (brokerBatchesSinceRestart().length === 0) await writeSome(ledger, w, 5, extraSeed++);
        return brokerBatchesSinceRestart();
      },
      (lines) => lines.length > 0,
      45_000,
      500,
    );
    await drained("after the writes that follow the restart");

    sampling = false;
    await sampler;
    await assertConverged(ledger);
    await assertDedupKeysComplete(db.pool);
    const audit = await runCli(["audit"], env);
    assert.equal(audit.code, 0, audit.stdout + audit.stderr);
    assert.ok(maxLag <= PHASE * 2, `lag stayed within two phases of writes throughout (max ${maxLag})`);
    t.diagnostic(
      `note maxLag=${maxLag}; gap-filled batches from the outbox: ${fillsBeforeRestart} before the broker restart, ${fills() - fillsBeforeRestart} after; broker batches after the restart: ${afterRestart.length}`,
    );
  },
);
