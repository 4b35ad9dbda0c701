/**
 * Workers as separate processes, one of them killed -9 while requests flow: `serve --no-workers`
 * plus two `social-ledger worker` processes (one on every partition, one on 1 and 3) against
 * this file's database (DATABASE_URL, 4 partitions). Lanes of HTTP clients like/unlike and
 * follow/unfollow. The all-partition worker (worker-A, the only one on partition 0) is killed -9
 * in the middle of a partition-0 like batch: the test holds, uncommitted, the dedup key of the next
 * partition-0 event, so worker-A's batch waits inside its transaction (watermark and count rows
 * locked) until the kill; the batch must then roll back. Traffic goes on (partitions 0 and 2 now
 * lag), a replacement starts, and after the drain every count equals the facts, nothing was
 * applied twice, and both GET /v1/admin/audit and `audit` are clean.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { signToken } from "../../src/api/auth.ts";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { seededRandom } from "../support/concurrency.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { backendPid } from "../../src/db/pool.ts";
import { CliChild, childEnv, httpClient, pollUntil, processAlive, runCli } from "./cli-child.ts";

const PARTITIONS = 4;
const USERS = Array.from({ length: 12 }, (_, i) => `u${String(i).padStart(2, "0")}`);
const ITEMS = ["i0", "i1", "i2", "i3", "i4", "i5"];
const LANES = 4;
/** Operations per phase: before the kill, across it, after the replacement started. */
const PHASES = { before: 120, across: 180, after: 60 };
/** worker-A's connections carry this name (from its DATABASE_URL), so its backends can be told from worker-B's. */
const WORKER_A_APP = "worker-A";
const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const BATCH = /"msg":"batch"/;

interface WorkerLine {
  msg: string;
  consumer?: string;
  applied?: number;
}

test(
  "worker processes: kill -9 one in the middle of a batch, replace it, drain: audit clean, nothing applied twice",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 4 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-cli-workers-"));
    const secret = randomBytes(32).toString("hex");
    const env = childEnv({
      DATABASE_URL: db.url,
      LEDGER_JWT_SECRET: secret,
      LEDGER_DATA_DIR: dataDir,
      PORT: String(await freePort()),
      LOG_LEVEL: "warn",
      LEDGER_WRITES_PER_MINUTE: "1000000",
    });
    const children: CliChild[] = [];
    // Workers log their batches at info (the lines this test reads); serve stays quiet at warn.
    const workerEnv = { ...env, LOG_LEVEL: "info" };
    const start = (name: string, args: string[]) => {
      const child = new CliChild(name, args, args[0] === "worker" ? workerEnv : env);
      children.push(child);
      return child;
    };
    t.after(async () => {
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      for (const child of children)
        assert.equal(processAlive(child.pid), false, `${child.name} (pid ${child.pid}) is gone`);
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });

    const server = start("serve", ["serve", "--no-workers"]);
    const urlA = new URL(db.url);
    urlA.searchParams.set("application_name", WORKER_A_APP); // the connection string's parameters override the pool's name
    const workerA = new CliChild("worker-A", ["worker"], { ...workerEnv, DATABASE_URL: urlA.toString() });
    children.push(workerA);
    const workerB = start("worker-B", ["worker", "--partitions", "1,3"]);
    const address = LISTENING.exec(await server.waitFor(LISTENING))![1]!;
    assert.ok(
      server.errorLines.some((l) => /consumers: none in this process/.test(l)),
      "serve --no-workers runs no consumer",
    );
    await Promise.all([workerA.waitFor(/"msg":"started"/), workerB.waitFor(/"msg":"started"/)]);

    const key = new TextEncoder().encode(secret);
    const admin = await signToken(key, "admin", { admin: true });
    const tokens = new Map(await Promise.all(USERS.map(async (u) => [u, await signToken(key, u)] as const)));
    const http = httpClient(address);
    for (const item of ITEMS) assert.equal((await http("PUT", `/v1/items/${item}`, admin)).status, 200);
    for (const u of USERS)
      assert.equal((await http("PUT", `/v1/accounts/${u}`, admin, { private: false })).status, 200);

    // The model, from the responses. Each user belongs to one lane, and a lane sends one request
    // at a time, so the last response for a pair is its state.
    const liked = new Map<string, boolean>();
    const following = new Map<string, boolean>();
    let sent = 0;
    let inFlight = 0;
    const random = Array.from({ length: LANES }, (_, lane) => seededRandom(4000 + lane));

    async function lane(index: number, ops: number): Promise<void> {
      const r = random[index]!;
      const mine = USERS.filter((_, i) => i % LANES === index);
      for (let op = 0; op < ops; op++) {
        const u = mine[Math.floor(r() * mine.length)]!;
        const token = tokens.get(u)!;
        const on = r() < 0.6;
        inFlight++;
        if (r() < 0.6) {
          const item = ITEMS[Math.floor(r() * ITEMS.length)]!;
          const res = await http<{ liked: boolean }>(on ? "PUT" : "DELETE", `/v1/items/${item}/likes/me`, token);
          assert.equal(res.status, 200, JSON.stringify(res.body));
          liked.set(`${u}|${item}`, res.body.liked);
        } else {
          const others = USERS.filter((v) => v !== u);
          const v = others[Math.floor(r() * others.length)]!;
          const res = await http<{ state: string }>(on ? "PUT" : "DELETE", `/v1/accounts/me/following/${v}`, token);
          assert.equal(res.status, 200, JSON.stringify(res.body));
          following.set(`${u}|${v}`, res.body.state === "ACTIVE");
        }
        inFlight--;
        sent++;
      }
    }
    const phase = (ops: number) =>
      Promise.all(Array.from({ length: LANES }, (_, i) => lane(i, Math.ceil(ops / LANES))));

    await phase(PHASES.before);
    // worker-A alone serves partition 0: wait until it has committed all of that partition's events.
    type Mark = { last: number; watermark: number };
    const part0 = async () =>
      (
        await db.pool.query<Mark>(
          "SELECT s.last, w.applied_upto AS watermark FROM like_seq s JOIN counter_watermark w USING (part) WHERE part = 0",
        )
      ).rows[0]!;
    const caughtUp = await pollUntil("worker-A caught up on partition 0", part0, (m) => m.watermark === m.last, 30_000);
    assert.ok(caughtUp.watermark > 0, "worker-A had committed partition-0 batches before the kill");

    // Hold the dedup key of the next partition-0 event in an open transaction: worker-A's next
    // partition-0 batch (it starts with that event) locks its watermark and count rows, and its
    // insert into processed_event then waits for this transaction to end (a unique key conflict
    // with an insert in progress waits for its outcome). The batch is in progress until we let go.
    type Backend = { pid: number; state: string; wait: string | null; xid: string | null };
    const holder = await db.pool.connect();
    let parked: Backend;
    let across: Promise<unknown>;
    let killedAt: number;
    try {
      await holder.query("BEGIN");
      await holder.query("INSERT INTO processed_event (part, seq, how) VALUES (0, $1, 'APPLIED')", [caughtUp.last + 1]);
      across = phase(PHASES.across);
      parked = await pollUntil(
        "worker-A's partition-0 batch waits for the held dedup key",
        async () =>
          (
            await db.pool.query<Backend>(
              `SELECT pid, state, wait_event_type AS wait, backend_xid::text AS xid FROM pg_stat_activity
          WHERE application_name = $1 AND $2 = ANY (pg_blocking_pids(pid))`,
              [WORKER_A_APP, backendPid(holder)],
            )
          ).rows,
        (rows) => rows.length === 1,
        30_000,
      ).then((rows) => rows[0]!);
      assert.ok(parked.xid !== null, "worker-A's batch has written (it holds an xid)");
      killedAt = sent;
      const inFlightAtKill = inFlight;
      const killed = await workerA.stop("SIGKILL");
      assert.deepEqual(killed, { code: null, signal: "SIGKILL" });
      t.diagnostic(
        `note in flight at the kill: worker-A backend pid=${parked.pid} state=${parked.state} wait=${parked.wait} xid=${parked.xid} ` +
          `(partition-0 batch from seq ${caughtUp.last + 1}, committed watermark ${caughtUp.watermark}); HTTP requests in flight=${inFlightAtKill}`,
      );

      // Let go: the dead client's backend finishes the statement, finds no client and ends; its
      // transaction was never committed.
      await holder.query("ROLLBACK");
    } finally {
      holder.release(true); // closed, not pooled: it may still be inside its transaction if a step above failed
    }
    await pollUntil(
      "worker-A's backend gone",
      async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [parked.pid])).rowCount,
      (n) => n === 0,
      15_000,
    );
    const {
      rows: [after],
    } = await db.pool.query<{ status: string; watermark: number; processed: number }>(
      `SELECT pg_xact_status($1::text::xid8) AS status,
            (SELECT applied_upto FROM counter_watermark WHERE part = 0) AS watermark,
            (SELECT count(*) FROM processed_event WHERE part = 0 AND seq > $2)::int AS processed`,
      [parked.xid, caughtUp.last],
    );
    t.diagnostic(
      `note after the kill: worker-A's batch transaction ${parked.xid} ${after!.status}; partition 0 watermark=${after!.watermark} processed above ${caughtUp.last}=${after!.processed}`,
    );
    assert.deepEqual(
      after,
      { status: "aborted", watermark: caughtUp.watermark, processed: 0 },
      "the batch in flight at the kill left nothing",
    );
    await across;
    t.diagnostic(
      `note worker-A killed -9 after ${workerA.lines.filter((l) => BATCH.test(l)).length} logged batch(es), at request ${killedAt}; ${sent - killedAt} more sent`,
    );

    type Status = { views: { view: string; part: number; last: number; appliedUpto: number; lag: number }[] };
    const status = async () => (await http<Status>("GET", "/v1/admin/status", admin)).body;
    const stalled = (await status()).views.filter((v) => v.lag > 0 && (v.part === 0 || v.part === 2));
    t.diagnostic(
      `note lag on partitions served only by the killed worker: ${JSON.stringify(stalled.map((v) => [v.view, v.part, v.lag]))}`,
    );
    assert.ok(stalled.length > 0, "partitions 0 and 2 stopped advancing with worker-A gone");

    const workerA2 = start("worker-A2", ["worker"]);
    await workerA2.waitFor(/"msg":"started"/);
    await phase(PHASES.after);
    const drained = await pollUntil("every view caught up", status, (s) => s.views.every((v) => v.lag === 0), 30_000);
    assert.equal(drained.views.length, 3 * PARTITIONS);

    const audit = await http<{ clean: boolean }>("GET", "/v1/admin/audit", admin);
    assert.equal(audit.status, 200);
    assert.equal(audit.body.clean, true, JSON.stringify(audit.body));
    const cli = await runCli(["audit"], env);
    assert.equal(cli.code, 0, cli.stdout + cli.stderr);
    assert.match(cli.stdout, /^clean: no violation$/m);

    // Every count equals the model built from the responses, read from the derived views at lag 0.
    for (const item of ITEMS) {
      const expected = [...liked].filter(([k, v]) => v && k.endsWith(`|${item}`)).length;
      const res = await http<{ count: number; stale: boolean }>(
        "GET",
        `/v1/items/${item}/like-count?allowedLag=0`,
        admin,
      );
      assert.deepEqual(
        { count: res.body.count, stale: res.body.stale },
        { count: expected, stale: false },
        `like count of ${item}`,
      );
    }
    for (const u of USERS) {
      const expected = [...following].filter(([k, v]) => v && k.endsWith(`|${u}`)).length;
      const res = await http<{ count: number; stale: boolean }>(
        "GET",
        `/v1/accounts/${u}/follower-count?allowedLag=0`,
        admin,
      );
      assert.deepEqual(
        { count: res.body.count, stale: res.body.stale },
        { count: expected, stale: false },
        `follower count of ${u}`,
      );
    }
    // Exactly once: one processed row per event, each APPLIED (no rebuild ran), and the applied
    // counts the workers logged never add up to more than there were events.
    const {
      rows: [exact],
    } = await db.pool.query<{ likes: number; applied: number; relations: number; seen: number }>(
      `SELECT (SELECT count(*) FROM like_outbox)::int AS likes,
            (SELECT count(*) FROM processed_event WHERE how = 'APPLIED')::int AS applied,
            (SELECT count(*) FROM relation_event)::int AS relations,
            (SELECT count(*) FROM proj_seen)::int AS seen`,
    );
    assert.equal(exact!.applied, exact!.likes, "every like event applied exactly once");
    assert.equal(exact!.seen, exact!.relations, "every relation event projected exactly once");
    const workers = [workerA, workerB, workerA2];
    const logged = workers.flatMap((w) => w.lines.map((line) => JSON.parse(line) as WorkerLine)); // every line is JSON
    const appliedLogged = (consumer: string) =>
      logged.filter((l) => l.msg === "batch" && l.consumer === consumer).reduce((sum, l) => sum + (l.applied ?? 0), 0);
    t.diagnostic(
      `note events: likes=${exact!.likes} relations=${exact!.relations}; logged applied: like_count=${appliedLogged("like_count")} ` +
        `follower_projection=${appliedLogged("follower_projection")}; batches per worker: ` +
        workers.map((w) => `${w.name}=${w.lines.filter((l) => BATCH.test(l)).length}`).join(" "),
    );
    assert.ok(appliedLogged("like_count") <= exact!.likes);
    assert.ok(appliedLogged("follower_projection") <= exact!.relations);

    // Graceful stops: the current batch commits, exit 0.
    for (const child of [workerB, workerA2, server]) {
      assert.deepEqual(await child.stop("SIGTERM"), { code: 0, signal: null }, `${child.name}: ${child.stderr}`);
    }
    for (const w of [workerB, workerA2]) assert.match(w.lines.at(-1)!, /"msg":"stopped"/);
  },
);
