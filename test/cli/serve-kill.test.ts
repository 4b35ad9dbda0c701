/**
 * `kill -9` of the service, and of its embedded PostgreSQL, while likes are in flight loses
 * nothing acknowledged and keeps nothing unacknowledged. Lanes of HTTP clients like (each pair
 * once) against `serve`; the test then holds every like_seq row in a transaction of its own, so
 * each lane's next like waits inside its transaction (fact row written, not committed), and once
 * every lane's request waits there it kills serve and then its postmaster and server processes
 * with -9: the data directory is left as after a power cut (pg_control still says "in
 * production"). The next `serve` on the same data directory runs crash recovery; every
 * acknowledged like is there, none of those in flight, counts equal facts after the drain, and
 * `audit` is clean. A second test kills serve alone: its PostgreSQL runs on as an orphan, and the
 * next serve shuts that orphan down cleanly (no crash recovery) and adopts the data directory.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { signToken } from "../../src/api/auth.ts";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { embeddedSuperuserUrl } from "../../src/runtime/embedded-access.ts";
import { processState } from "../../src/runtime/process-state.ts";
import { LIKE_BATCHES_IN_FLIGHT } from "../../src/likes/like-service.ts";
import { withDeadline } from "../support/line-child.ts";
import { formatOpenTransactions, openTransactions } from "../support/pg-locks.ts";
import { CliChild, childEnv, httpClient, pollUntil, postmasterPid, processAlive, runCli } from "./cli-child.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const ITEMS = ["hot", "warm"];
const LANES = 6;
const PARTITIONS = 4;
/** Acknowledged likes before the test holds the sequence rows. */
const ACKED_BEFORE_HOLD = 60;
/** pg_control's DBState (src/include/catalog/pg_control.h): cleanly shut down, and running (or died running). */
const DB_SHUTDOWNED = 1;
const DB_IN_PRODUCTION = 6;

type Outcome = "acked" | "rejected" | "unknown";

/** The cluster state pg_control records: a uint32 after the system identifier and two version numbers. */
function pgControlState(pgData: string): number {
  return readFileSync(path.join(pgData, "global", "pg_control")).readUInt32LE(16);
}

/** The direct children of a process (the postmaster's server processes), from the parent pid field of /proc/<pid>/stat. */
function childrenOf(pid: number): number[] {
  const parentOf = (entry: string): number | undefined => {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      return undefined; // it ended while we looked
    }
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  };
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry) && parentOf(entry) === pid)
    .map(Number);
}

/** The embedded server's log (serve appends it to postgresql.log in the data directory), from byte `from` on. */
function serverLogSince(dataDir: string, from: number): string {
  const file = path.join(dataDir, "postgresql.log");
  return existsSync(file) ? readFileSync(file).subarray(from).toString("utf8") : "";
}

/** A superuser pool on serve's embedded cluster, for the test's independent SQL. */
async function embeddedPool(dataDir: string, port: number): Promise<Pool> {
  return createPool({
    connectionString: await embeddedSuperuserUrl(dataDir, port),
    max: 3,
    applicationName: "serve-kill-test",
  });
}

interface Lab {
  dataDir: string;
  pgData: string;
  env: NodeJS.ProcessEnv;
  /** Starts `serve` on the data directory and returns it with a client for its address. */
  serve(name: string): Promise<{ server: CliChild; call: ReturnType<typeof httpClient> }>;
  token(user: string): Promise<string>;
  admin: string;
  /** Pools to end when the test ends. */
  pools: Pool[];
}

/** A data directory of the test's own, and everything it started stopped (and removed) when the test ends. */
async function serveLab(t: TestContext): Promise<Lab> {
  const dataDir = await clusterTempDir("ledger-cli-kill9-");
  const pgData = path.join(dataDir, "pg");
  const secret = randomBytes(32).toString("hex");
  const env = childEnv({
    LEDGER_DATA_DIR: dataDir,
    PORT: String(await freePort()),
    LOG_LEVEL: "warn",
    LEDGER_JWT_SECRET: secret,
    LEDGER_PARTITIONS: String(PARTITIONS),
    LEDGER_WRITES_PER_MINUTE: "1000000",
  });
  const children: CliChild[] = [];
  const pools: Pool[] = [];
  t.after(async () => {
    for (const pool of pools) await pool.end().catch(() => undefined);
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    const pgPid = postmasterPid(pgData);
    if (pgPid !== undefined && processAlive(pgPid)) {
      process.kill(pgPid, "SIGQUIT");
      await pollUntil(
        "leftover postmaster gone",
        async () => processAlive(pgPid),
        (isAlive) => !isAlive,
        15_000,
      );
    }
    await rm(dataDir, { recursive: true, force: true });
  });
  const key = new TextEncoder().encode(secret);
  const tokens = new Map<string, string>();
  return {
    dataDir,
    pgData,
    env,
    pools,
    admin: await signToken(key, "root", { admin: true }),
    token: async (user) => tokens.get(user) ?? tokens.set(user, await signToken(key, user)).get(user)!,
    async serve(name) {
      const server = new CliChild(name, ["serve"], env);
      children.push(server);
      return { server, call: httpClient(LISTENING.exec(await server.waitFor(LISTENING, 90_000))![1]!) };
    },
  };
}

test(
  "serve and its PostgreSQL killed with -9 mid-like: crash recovery keeps every acknowledged like and none in flight",
  { timeout: 150_000 },
  async (t) => {
    const { dataDir, pgData, env, pools, admin, token, serve } = await serveLab(t);
    const { server: server1, call } = await serve("serve#1");
    for (const item of ITEMS) assert.equal((await call("PUT", `/v1/items/${item}`, admin)).status, 200);
    const port = Number((await readFile(path.join(dataDir, "pg-port"), "utf8")).trim());
    const observer = await embeddedPool(dataDir, port);
    pools.push(observer);

    // Each lane likes new (user, item) pairs one request at a time, until its request fails.
    const outcomes = new Map<string, Outcome>();
    let inFlight = 0;
    /** The users whose like is in flight now. */
    const inFlightUsers = new Set<string>();
    /**
     * Backends a held sequence row keeps waiting when every lane's like is in flight: group commit
     * sends at most LIKE_BATCHES_IN_FLIGHT statements for the whole service, whatever their
     * partitions, and a further like waits in serve's queue for them (it is in flight all the same,
     * and unanswered).
     */
    const expectedWaiting = () => Math.min(inFlightUsers.size, LIKE_BATCHES_IN_FLIGHT);
    const acked = () => [...outcomes.values()].filter((o) => o === "acked").length;
    async function lane(index: number): Promise<void> {
      for (let i = 0; ; i++) {
        const user = `fan-${index}-${i}`;
        const item = ITEMS[i % ITEMS.length]!;
        const pair = `${user}|${item}`;
        const bearer = await token(user);
        outcomes.set(pair, "unknown");
        inFlight++;
        inFlightUsers.add(user);
        try {
          const res = await call<{ liked: boolean }>("PUT", `/v1/items/${item}/likes/me`, bearer);
          outcomes.set(pair, res.status === 200 && res.body.liked ? "acked" : "rejected");
        } catch {
          return; // the server is gone: this request's outcome stays unknown to the client
        } finally {
          inFlight--;
          inFlightUsers.delete(user);
        }
      }
    }
    const lanes = Promise.all(Array.from({ length: LANES }, (_, i) => lane(i)));

    // Acknowledged likes accumulate and the consumer commits some of them.
    await pollUntil(
      "likes acknowledged",
      async () => acked(),
      (n) => n >= ACKED_BEFORE_HOLD,
      60_000,
    );
    await pollUntil(
      "the consumer committed batches",
      async () =>
        (await observer.query<{ w: number }>("SELECT sum(applied_upto)::bigint AS w FROM counter_watermark")).rows[0]!
          .w,
      (w) => w > 0,
      30_000,
    );

    // Hold every partition's sequence row: each lane's next like waits inside its transaction.
    const holder = await observer.connect();
    holder.on("error", () => undefined); // its server is about to be killed
    await holder.query("BEGIN");
    await holder.query("SELECT part FROM like_seq FOR UPDATE");
    let waiting: number;
    try {
      waiting = await pollUntil(
        "every lane's like waits on the held rows (in PostgreSQL, or queued behind the batches in flight)",
        async () =>
          inFlight === LANES
            ? (
                await observer.query<{ n: number }>(
                  "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'social-ledger-serve' AND wait_event_type = 'Lock'",
                )
              ).rows[0]!.n
            : -1,
        (n) => inFlight === LANES && n === expectedWaiting(),
        30_000,
      );
    } catch (err) {
      // A hold left open keeps the waiting likes (and the pool's end at teardown) waiting forever:
      // the test would hang instead of failing with the poll's message.
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release(true);
      throw err;
    }
    const open = await openTransactions(observer);
    const {
      rows: [committed],
    } = await observer.query<{ watermark: number; last: number }>(
      "SELECT (SELECT sum(applied_upto) FROM counter_watermark)::bigint AS watermark, (SELECT sum(last) FROM like_seq)::bigint AS last",
    );
    const ackedAtKill = acked();
    const inFlightAtKill = inFlight;
    t.diagnostic(
      `note in flight at the kill: HTTP likes=${inFlightAtKill}, serve backends waiting on the held rows=${waiting}, ${formatOpenTransactions(open)}; acked=${ackedAtKill}; committed like_seq.last=${committed!.last} watermark=${committed!.watermark}`,
    );
    assert.equal(inFlightAtKill, LANES, "every lane has a like in flight");
    assert.ok(committed!.watermark > 0, "the consumer had committed work before the kill");

    // Power cut: serve, then its postmaster and every server process, with -9.
    const postmaster = postmasterPid(pgData)!;
    const serverProcesses = childrenOf(postmaster);
    assert.deepEqual(await server1.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
    process.kill(postmaster, "SIGKILL");
    for (const pid of serverProcesses) if (processState(pid) === "running") process.kill(pid, "SIGKILL");
    holder.release(true);
    await withDeadline(lanes, 30_000, () => "lanes did not end after the kill");
    // The dead processes are reparented and reaped by init: until then a zombie still answers kill(pid, 0).
    const zombieSeen = new Set<number>();
    const killedAt = Date.now();
    const leftover = await pollUntil(
      "the killed PostgreSQL processes are reaped",
      async () => {
        const states = [postmaster, ...serverProcesses].map((pid) => [pid, processState(pid)] as const);
        for (const [pid, state] of states) if (state === "zombie") zombieSeen.add(pid);
        return states.filter(([, state]) => state !== "gone");
      },
      (rest) => rest.length === 0,
      30_000,
    );
    const reapedMs = Date.now() - killedAt;
    const state = pgControlState(pgData);
    const unknown = [...outcomes].filter(([, o]) => o === "unknown").map(([pair]) => pair);
    const rejected = [...outcomes].filter(([, o]) => o === "rejected").map(([pair]) => pair);
    t.diagnostic(
      `note killed serve#1, postmaster ${postmaster} and ${serverProcesses.length} server processes with -9; all reaped after ${reapedMs} ms (seen as zombies: ${zombieSeen.size}, the postmaster among them: ${zombieSeen.has(postmaster)}; left: ${leftover.length}); pg_control state=${state} (${DB_IN_PRODUCTION} = died running)`,
    );
    t.diagnostic(
      `note requests: acked=${ackedAtKill} rejected=${rejected.length} unknown to the client=${unknown.length}`,
    );
    assert.equal(state, DB_IN_PRODUCTION, "no shutdown checkpoint: the next start must run crash recovery");
    assert.equal(acked(), ackedAtKill, "no like was acknowledged after the lanes were seen waiting");
    assert.equal(unknown.length, LANES, "exactly the requests that waited on the held rows got no answer");

    const logBefore = existsSync(path.join(dataDir, "postgresql.log"))
      ? statSync(path.join(dataDir, "postgresql.log")).size
      : 0;
    const { server: server2, call: call2 } = await serve("serve#2");
    const adopted = postmasterPid(pgData)!;
    assert.notEqual(adopted, postmaster);
    const recovery = serverLogSince(dataDir, logBefore)
      .split("\n")
      .filter((l) => /not properly shut down|redo (starts|done)/.test(l));
    t.diagnostic(
      `note serve#2's PostgreSQL log: ${recovery.map((l) => l.replace(/^.*?(LOG|FATAL):\s*/, "")).join(" | ")}`,
    );
    assert.ok(
      recovery.some((l) => /automatic recovery in progress/.test(l)),
      "serve#2's PostgreSQL ran crash recovery",
    );
    const reader = await embeddedPool(dataDir, port);

    // Every acknowledged like is a fact; nothing of the requests in flight (or rejected) is.
    const pairs = (list: string[]) => [list.map((p) => p.split("|")[0]!), list.map((p) => p.split("|")[1]!)];
    const countFacts = async (list: string[], onlyLiked: boolean) =>
      (
        await reader.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM unnest($1::text[], $2::text[]) AS a(user_id, item_id)
       JOIN like_fact f USING (user_id, item_id) WHERE f.liked OR NOT $3`,
          [...pairs(list), onlyLiked],
        )
      ).rows[0]!.n;
    const ackedPairs = [...outcomes].filter(([, o]) => o === "acked").map(([pair]) => pair);
    const {
      rows: [facts],
    } = await reader.query<{ liked: number; rows: number }>(
      "SELECT count(*) FILTER (WHERE liked)::int AS liked, count(*)::int AS rows FROM like_fact",
    );
    const inFlightRows = await countFacts([...unknown, ...rejected], false);
    t.diagnostic(
      `note after recovery (serve#2, PostgreSQL pid ${adopted}): acked liked=${await countFacts(ackedPairs, true)}/${ackedPairs.length}; fact rows of requests in flight or rejected=${inFlightRows}; liked facts=${facts!.liked} fact rows=${facts!.rows}`,
    );
    assert.equal(await countFacts(ackedPairs, true), ackedPairs.length, "every acknowledged like survived");
    assert.equal(inFlightRows, 0, "nothing of the likes in flight at the kill survived");
    assert.deepEqual(
      facts,
      { liked: ackedPairs.length, rows: ackedPairs.length },
      "the facts are exactly the acknowledged likes",
    );

    // After the drain every count equals the facts, and the audit is clean.
    for (const item of ITEMS) {
      const expected = ackedPairs.filter((p) => p.endsWith(`|${item}`)).length;
      const count = await pollUntil(
        `count of ${item} caught up`,
        () => call2<{ count: number; stale: boolean }>("GET", `/v1/items/${item}/like-count?allowedLag=0`, admin),
        (res) => !res.body.stale,
        60_000,
      );
      assert.equal(count.body.count, expected, `count of ${item} = its acknowledged likes`);
    }
    const audit = await runCli(["audit"], env);
    assert.equal(audit.code, 0, audit.stdout + audit.stderr);
    assert.match(audit.stdout, /^clean: no violation$/m);

    await reader.end();
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
    assert.equal(processAlive(adopted), false, "the adopted PostgreSQL stopped with serve#2");
    assert.equal(pgControlState(pgData), DB_SHUTDOWNED, "a clean stop leaves pg_control shut down");
  },
);

test(
  "serve killed with -9 alone leaves its PostgreSQL running: the next serve stops that orphan cleanly and adopts the data directory",
  { timeout: 150_000 },
  async (t) => {
    const { dataDir, pgData, env, admin, token, serve } = await serveLab(t);
    const { server: server1, call } = await serve("serve#1");
    assert.equal((await call("PUT", "/v1/items/hot", admin)).status, 200);
    const likers = Array.from({ length: 10 }, (_, i) => `fan-${i}`);
    for (const user of likers)
      assert.equal((await call("PUT", "/v1/items/hot/likes/me", await token(user))).status, 200);
    const orphan = postmasterPid(pgData)!;
    assert.deepEqual(await server1.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
    assert.ok(processAlive(orphan), "the killed server's PostgreSQL is orphaned, still running");

    const logBefore = statSync(path.join(dataDir, "postgresql.log")).size;
    const { server: server2, call: call2 } = await serve("serve#2");
    assert.equal(processAlive(orphan), false, "the orphan was shut down");
    const adopted = postmasterPid(pgData)!;
    assert.notEqual(adopted, orphan);
    const startLog = serverLogSince(dataDir, logBefore);
    t.diagnostic(
      `note serve#2 stopped the orphan (pid ${orphan}) and runs PostgreSQL pid ${adopted}; crash recovery in its log: ${/not properly shut down/.test(startLog)}`,
    );
    assert.doesNotMatch(startLog, /not properly shut down/, "the orphan was shut down cleanly: no crash recovery");
    for (const user of likers) {
      const res = await call2<{ liked: boolean }>("GET", "/v1/items/hot/likes/me", await token(user));
      assert.deepEqual([res.status, res.body.liked], [200, true], user);
    }
    assert.equal((await runCli(["audit"], env)).code, 0);
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
    assert.equal(processAlive(adopted), false, "the adopted PostgreSQL stopped with serve#2");
  },
);
