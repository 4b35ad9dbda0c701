/**
 * The service survives its database dying, with real processes: `serve` as a child,
 * its PostgreSQL killed with -9 (embedded) or stopped with `-m immediate` (external, through
 * DATABASE_URL) while concurrent like/unlike clients run over HTTP. While the database is down
 * every answer is 503 DATABASE_UNAVAILABLE with Retry-After, never a 500; afterwards service
 * resumes without restarting node, and independent SQL finds every acknowledged write in the
 * facts, counts equal to the facts, and a clean audit. Also: a start right after a kill -9 of
 * the whole process group, while the dead server and postmaster are still zombies.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import { ClusterStartError, EmbeddedCluster, clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { createPool } from "../../src/db/pool.ts";
import { embeddedSuperuserUrl } from "../../src/runtime/embedded-access.ts";
import { processState } from "../../src/runtime/process-state.ts";
import { withDeadline } from "../support/line-child.ts";
import {
  BIN,
  CliChild,
  REPO_ROOT,
  childEnv,
  httpClient,
  pollUntil,
  postmasterPid,
  processAlive,
  runCli,
} from "./cli-child.ts";
import { LikeLoad, LOAD_SERVICE_ENV } from "./like-load.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const CLIENTS = 8;
const ITEMS = 16;
const LOAD_BEFORE_FAULT = 150;

interface Setup {
  dataDir: string;
  pgData: string;
  secret: string;
  env: NodeJS.ProcessEnv;
  children: CliChild[];
}

async function setup(t: TestContext, vars: Record<string, string> = {}): Promise<Setup> {
  const dataDir = await clusterTempDir("ledger-outage-");
  const pgData = path.join(dataDir, "pg");
  const secret = randomBytes(32).toString("hex");
  const env = childEnv({
    LEDGER_DATA_DIR: dataDir,
    LEDGER_JWT_SECRET: secret,
    PORT: String(await freePort()),
    LOG_LEVEL: "info",
    ...LOAD_SERVICE_ENV,
    ...vars,
  });
  const children: CliChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    const pgPid = postmasterPid(pgData);
    if (pgPid !== undefined && processAlive(pgPid)) {
      process.kill(pgPid, "SIGQUIT");
      await pollUntil(
        "leftover postmaster gone",
        async () => processAlive(pgPid),
        (alive) => !alive,
        15_000,
      );
    }
    await rm(dataDir, { recursive: true, force: true });
  });
  return { dataDir, pgData, secret, env, children };
}

async function serve(
  s: Setup,
  name: string,
  env: NodeJS.ProcessEnv = s.env,
): Promise<{ child: CliChild; address: string }> {
  const child = new CliChild(name, ["serve"], env);
  s.children.push(child);
  return { child, address: LISTENING.exec(await child.waitFor(LISTENING, 90_000))![1]! };
}

/** The superuser's URL of serve's embedded cluster, for the test's independent SQL. */
async function embeddedUrl(s: Setup): Promise<string> {
  const port = Number((await readFile(path.join(s.dataDir, "pg-port"), "utf8")).trim());
  return embeddedSuperuserUrl(s.dataDir, port);
}

/**
 * With independent SQL: every acknowledged like/unlike is the state of its pair, counts (read
 * through the service with allowedLag=0, once caught up) equal the facts, and the audit is clean.
 */
async function verifyNothingLost(
  t: TestContext,
  s: Setup,
  load: LikeLoad,
  url: string,
  address: string,
): Promise<void> {
  const pool = createPool({ connectionString: url, max: 2 });
  try {
    const { rows } = await pool.query<{ user_id: string; item_id: string; liked: boolean }>(
      "SELECT user_id, item_id, liked FROM like_fact WHERE user_id LIKE 'load-user-%'",
    );
    const stored = new Map(rows.map((r) => [`${r.user_id}/${r.item_id}`, r.liked]));
    const wrong = await load.mismatches(async (user, item) => stored.get(`${user}/${item}`) ?? false);
    assert.deepEqual(wrong, [], "acknowledged writes lost or resurrected");
    const facts = await pool.query<{ item_id: string; n: number }>(
      "SELECT item_id, count(*) FILTER (WHERE liked)::int AS n FROM like_fact WHERE item_id LIKE 'load-item-%' GROUP BY item_id",
    );
    const call = httpClient(address);
    const { signToken } = await import("../../src/api/auth.ts");
    const reader = await signToken(new TextEncoder().encode(s.secret), "reader");
    for (const { item_id: item, n } of facts.rows) {
      await pollUntil(
        `count of ${item} caught up`,
        () => call<{ count: number; stale: boolean }>("GET", `/v1/items/${item}/like-count?allowedLag=0`, reader),
        (res) => res.status === 200 && res.body.count === n && !res.body.stale,
        60_000,
      );
    }
    const checked = [...load.expected.values()].reduce((sum, m) => sum + m.size, 0);
    t.diagnostic(
      `note pairs checked=${checked} in doubt (last request unanswered)=${load.inDoubt.size}; items with counts equal to facts=${facts.rows.length}`,
    );
  } finally {
    await pool.end();
  }
  const audit = await runCli(["audit"], s.env);
  assert.equal(audit.code, 0, audit.stdout + audit.stderr);
}

test(
  "embedded PostgreSQL killed with -9 under HTTP load: only 503s while it is down, the service restarts it and resumes without restarting node, nothing acknowledged lost",
  { timeout: 240_000 },
  async (t) => {
    const s = await setup(t);
    const { child: server, address } = await serve(s, "serve");
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const killed = postmasterPid(s.pgData)!;
    process.kill(killed, "SIGKILL");
    await server.waitFor(/embedded PostgreSQL exited unexpectedly; restarting it/);
    await server.waitFor(/embedded PostgreSQL is running again/, 60_000);
    const figures = await load.until(
      "service resumed",
      (f) => f.unavailable > 0 && f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT,
    );
    await load.stop();
    t.diagnostic(
      `note acknowledged=${figures.acknowledged} (after the outage ${figures.acknowledgedAfterOutage}) 503=${figures.unavailable} other=${figures.unexpected.length}`,
    );
    assert.deepEqual(figures.unexpected, [], "nothing but 200 and 503 DATABASE_UNAVAILABLE with Retry-After");
    assert.ok(figures.unavailable > 0, "the load saw the outage");
    assert.ok(server.alive(), "node was not restarted");
    const restarted = postmasterPid(s.pgData)!;
    assert.notEqual(restarted, killed, "a new postmaster");

    const health = await httpClient(address)<{
      status: string;
      database: { state: string; restarts: number; lastExit: string };
    }>("GET", "/healthz");
    assert.deepEqual(
      [health.status, health.body.database.state, health.body.database.restarts, health.body.database.lastExit],
      [200, "up", 1, "signal SIGKILL"],
    );
    assert.equal((await httpClient(address)("GET", "/readyz")).status, 200);
    await verifyNothingLost(t, s, load, await embeddedUrl(s), address);

    const consumerLines = server.lines.filter((l) => /consumer (paused|resumed|pass failed)/.test(l));
    const perLoop = new Map<string, number>();
    for (const line of consumerLines) {
      const { worker, msg } = JSON.parse(line) as { worker: string; msg: string };
      const key = `${worker} ${msg.split(":")[0]}`;
      perLoop.set(key, (perLoop.get(key) ?? 0) + 1);
    }
    t.diagnostic(
      `note consumer log lines over the outage: ${consumerLines.length} for ${new Set([...perLoop.keys()].map((k) => k.split(" ")[0])).size} loops`,
    );
    assert.deepEqual(
      [...perLoop].filter(([, n]) => n > 1),
      [],
      "one line per loop and state change (paused, resumed), not one per attempt",
    );
    assert.ok(
      !server.lines.some((l) => /"level":50/.test(l) && /consumer/.test(l)),
      "no consumer error (with stack) for an unavailable database",
    );

    const started = Date.now();
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
    t.diagnostic(`note SIGTERM after recovery: exit 0 in ${Date.now() - started} ms`);
    assert.ok(server.lines.some((l) => /"msg":"stopped"/.test(l)));
    assert.equal(processAlive(restarted), false, "the restarted PostgreSQL stopped with serve");
  },
);

test(
  "LEDGER_EMBEDDED_RESTARTS=0: a dead embedded PostgreSQL makes serve exit 1 at once (for an outside supervisor); the next serve recovers and nothing acknowledged is lost",
  { timeout: 240_000 },
  async (t) => {
    const s = await setup(t);
    const { child: server, address } = await serve(s, "serve#1", { ...s.env, LEDGER_EMBEDDED_RESTARTS: "0" });
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.tolerateNetworkErrors = true;
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    process.kill(postmasterPid(s.pgData)!, "SIGKILL");
    const exit = await withDeadline(server.exited, 30_000, () => "serve#1 did not exit after its PostgreSQL died");
    const figures = await load.stop();
    t.diagnostic(
      `note serve#1 exit=${JSON.stringify(exit)} acknowledged=${figures.acknowledged} 503=${figures.unavailable} refused=${figures.networkErrors}`,
    );
    assert.deepEqual(exit, { code: 1, signal: null }, "a failure an outside supervisor sees");
    assert.ok(server.lines.some((l) => /restarts are disabled/.test(l)));
    assert.ok(server.lines.some((l) => /stopped \(exit code 1\)/.test(l)));
    assert.deepEqual(figures.unexpected, []);

    const { child: server2, address: address2 } = await serve(s, "serve#2");
    await verifyNothingLost(t, s, load, await embeddedUrl(s), address2);
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
  },
);

/**
 * A parent that adopts orphans (PR_SET_CHILD_SUBREAPER) and reaps nothing until told to: the
 * zombie window after a kill -9 of a process group, held open for as long as the test needs.
 */
const REAPER = `
import ctypes, os, subprocess, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
child = subprocess.Popen(sys.argv[1:], start_new_session=True)
print(f"reaper child {child.pid}", flush=True)
sys.stdin.readline()
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
`;

test(
  "a start right after a kill -9 of the whole process group succeeds at the first try while the dead server and postmaster are still zombies",
  { timeout: 240_000 },
  async (t) => {
    const s = await setup(t);
    const reaper = spawn("python3", ["-c", REAPER, process.execPath, BIN, "serve"], {
      cwd: REPO_ROOT,
      env: s.env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const reaperExit = new Promise((resolve) => reaper.on("exit", resolve));
    t.after(async () => {
      reaper.stdin.end("\n");
      await withDeadline(reaperExit, 15_000, () => "reaper did not exit");
    });
    const lines: string[] = [];
    const listening = new Promise<string>((resolve) => {
      // serve's JSON logs on stdout, its banner on stderr; the reaper's own line on stdout.
      for (const input of [reaper.stdout, reaper.stderr]) {
        createInterface({ input }).on("line", (line) => {
          lines.push(line);
          const m = LISTENING.exec(line);
          if (m) resolve(m[1]!);
        });
      }
    });
    const address = await withDeadline(
      listening,
      90_000,
      () => `serve under the reaper did not start:\n${lines.join("\n")}`,
    );
    const serverPid = Number(/^reaper child (\d+)$/.exec(lines.find((l) => l.startsWith("reaper child"))!)![1]);
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.tolerateNetworkErrors = true;
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const postmaster = postmasterPid(s.pgData)!;
    process.kill(-serverPid, "SIGKILL");
    await pollUntil(
      "server and postmaster are zombies",
      async () => [processState(serverPid), processState(postmaster)],
      (st) => st.every((x) => x === "zombie"),
      15_000,
    );
    const figures = await load.stop();

    // The window is real: a signal probe takes both zombies for running processes (the ownership
    // rule before this fix said "a live server owns it" and connected to nothing), and PostgreSQL's
    // own lock-file check refuses the data directory while the zombie's postmaster.pid is there.
    assert.doesNotThrow(() => process.kill(serverPid, 0));
    assert.doesNotThrow(() => process.kill(postmaster, 0));
    const direct = await EmbeddedCluster.start({ dataDir: s.pgData }).then(
      async (cluster) => {
        await cluster.stop();
        return "started";
      },
      (err: unknown) => (err instanceof ClusterStartError ? err.message : String(err)),
    );
    assert.match(direct, /lock file "postmaster.pid" already exists/);

    const started = Date.now();
    const { child: server2, address: address2 } = await serve(s, "serve#2");
    t.diagnostic(
      `note after the group kill: acknowledged=${figures.acknowledged}; serve#2 listening in ${Date.now() - started} ms at the first try, old server ${processState(serverPid)}, old postmaster ${processState(postmaster)}`,
    );
    assert.deepEqual(
      [processState(serverPid), processState(postmaster)],
      ["zombie", "zombie"],
      "the zombie window was open throughout",
    );
    await verifyNothingLost(t, s, load, await embeddedUrl(s), address2);
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
  },
);

test(
  "external database (DATABASE_URL) stopped with -m immediate under HTTP load and started again: 503s while it is down, /readyz says so, service resumes without restarting node, nothing acknowledged lost",
  { timeout: 240_000 },
  async (t) => {
    const root = await clusterTempDir("ledger-outage-external-");
    const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
    t.after(async () => {
      await cluster.stop();
      await rm(root, { recursive: true, force: true });
    });
    const s = await setup(t, { DATABASE_URL: cluster.connectionString() });
    const { child: server, address } = await serve(s, "serve");
    const call = httpClient(address);
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    await cluster.crashImmediate();
    await load.until("the load sees the outage", (f) => f.unavailable >= CLIENTS);
    const ready = await call<{ error: { code: string } }>("GET", "/readyz");
    const live = await call<{ status: string; database: { kind: string; state: string } }>("GET", "/healthz");
    assert.deepEqual(
      [ready.status, ready.body.error.code, ready.headers.get("retry-after") !== null],
      [503, "DATABASE_UNAVAILABLE", true],
    );
    assert.deepEqual(
      [live.status, live.body.database.kind],
      [200, "external"],
      "liveness does not restart a process for a database outage",
    );
    await cluster.restart();
    const figures = await load.until("service resumed", (f) => f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT);
    await load.stop();
    t.diagnostic(
      `note acknowledged=${figures.acknowledged} (after the outage ${figures.acknowledgedAfterOutage}) 503=${figures.unavailable} other=${figures.unexpected.length}`,
    );
    assert.deepEqual(figures.unexpected, [], "nothing but 200 and 503 DATABASE_UNAVAILABLE with Retry-After");
    assert.ok(server.alive(), "node was not restarted");
    assert.equal((await call("GET", "/readyz")).status, 200);
    await verifyNothingLost(t, s, load, cluster.connectionString(), address);
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
  },
);
