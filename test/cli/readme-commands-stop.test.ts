/**
 * What a user runs by the README stops when told: `npm start` and `npx social-ledger serve`, each
 * spawned exactly so (npm's own script under this node, with a free PORT and a new
 * LEDGER_DATA_DIR, so the embedded PostgreSQL is started), are sent SIGTERM or SIGINT on the pid
 * the test started, as a supervisor does; the test then waits until the service's process, its
 * port and its postmaster (the pid in the data directory's postmaster.pid) are gone, within the
 * time docs/service.md gives (STOP_WITHIN_MS). `npm start` exits 0; under npx npm exits by the
 * signal (npm re-raises what killed its shell) and the service logs its clean stop. A Ctrl-C in a
 * terminal (SIGINT to the whole process group: npm, node and PostgreSQL) stops both cleanly too.
 * (A SIGINT to npx's pid alone never reaches the service: npm passes it to its `sh -c`, which
 * holds it until its child exits; docs/service.md says to run `npm start` under a supervisor.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { connect } from "node:net";
import path from "node:path";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { LineChild, withDeadline, type Exit } from "../support/line-child.ts";
import { npmScript, pollUntil, postmasterPid, processAlive, REPO_ROOT, userEnv } from "./cli-child.ts";

/** docs/service.md, "Signals and exit codes": a stop at rest takes well under this. */
const STOP_WITHIN_MS = 30_000;
const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

interface Stopped {
  launcherExit: Exit;
  ms: number;
  lines: string[];
}

/** Starts `argv` (after node) in a new data directory, signals the pid it started, and waits until service, port and postmaster are gone. */
async function startAndSignal(
  argv: string[],
  signal: NodeJS.Signals,
  options: { group?: boolean } = {},
): Promise<Stopped> {
  const dataDir = await clusterTempDir("ledger-stop-");
  const port = await freePort();
  const child = new LineChild(argv.map((a) => path.basename(a)).join(" "), argv, {
    cwd: REPO_ROOT,
    env: userEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: "info" }),
    ...(options.group ? { detached: true } : {}),
  });
  const launcherExited = new Promise<Exit>((resolve) =>
    child.proc.on("exit", (code, sig) => resolve({ code, signal: sig })),
  );
  let servicePid: number | undefined;
  let postmaster: number | undefined;
  try {
    await child.waitFor(LISTENING, 120_000);
    servicePid = Number(/"pid":(\d+)/.exec(child.lines.find((l) => l.includes('"pid":')) ?? "")?.[1]);
    assert.ok(servicePid > 0, `the service's pid is in its log:\n${child.lines.join("\n")}`);
    postmaster = postmasterPid(path.join(dataDir, "pg"));
    assert.ok(postmaster !== undefined && processAlive(postmaster), "the embedded PostgreSQL runs");
    assert.equal(await portOpen(port), true);
    const sentAt = Date.now();
    if (options.group) process.kill(-child.pid, signal);
    else process.kill(child.pid, signal);
    const what = () =>
      `${signal} to ${child.name} (pid ${child.pid}); service ${servicePid} alive: ${processAlive(servicePid!)}, postmaster ${postmaster} alive: ${processAlive(postmaster!)}\nstdout:\n${child.lines.join("\n")}\nstderr:\n${child.stderr}`;
    const launcherExit = await withDeadline(launcherExited, STOP_WITHIN_MS, what);
    await pollUntil(
      "service, port and PostgreSQL gone",
      async () => ({
        service: processAlive(servicePid!),
        postmaster: processAlive(postmaster!),
        port: await portOpen(port),
      }),
      (s) => !s.service && !s.postmaster && !s.port,
      Math.max(0, STOP_WITHIN_MS - (Date.now() - sentAt)),
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${what()}`);
    });
    const ms = Date.now() - sentAt;
    await withDeadline(child.exited, 5_000, what);
    return { launcherExit, ms, lines: child.lines };
  } finally {
    if (child.alive()) child.proc.kill("SIGKILL");
    for (const pid of [servicePid, postmaster])
      if (pid !== undefined && processAlive(pid)) process.kill(pid, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
  }
}

/**
 * The service's log says it stopped cleanly (its last line "stopped", at info), and, for a signal
 * to npm's pid alone, nothing at error level. A Ctrl-C also reaches PostgreSQL's backends, where
 * SIGINT cancels the running statement: a consumer's poll may log that cancellation.
 */
function assertCleanStop(lines: string[], reason: RegExp, options: { groupSignal?: boolean } = {}): void {
  const log = lines.map((l) => JSON.parse(l) as { level: number; msg: string; err?: { sqlState?: string } });
  assert.ok(
    log.some((l) => l.level === 30 && reason.test(l.msg)),
    `the stop's reason is logged: ${lines.join("\n")}`,
  );
  assert.equal(log.at(-1)?.msg, "stopped", lines.join("\n"));
  assert.equal(log.at(-1)?.level, 30, lines.join("\n"));
  assert.deepEqual(
    log.filter((l) => l.level >= 50 && !(options.groupSignal && l.err?.sqlState === "57014")),
    [],
  );
}

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  test(
    `npm start: ${signal} to npm's pid stops the service and its embedded PostgreSQL; npm exits 0`,
    { timeout: 180_000 },
    async (t) => {
      const stopped = await startAndSignal([npmScript("npm"), "start"], signal);
      t.diagnostic(`note stopped ${stopped.ms} ms after ${signal}`);
      assert.deepEqual(stopped.launcherExit, { code: 0, signal: null });
      assertCleanStop(stopped.lines, new RegExp(`^${signal}: stopping`));
    },
  );
}

test(
  "npm start: a Ctrl-C (SIGINT to the process group: npm, node and PostgreSQL at once) stops it cleanly; npm exits 0",
  { timeout: 180_000 },
  async (t) => {
    const stopped = await startAndSignal([npmScript("npm"), "start"], "SIGINT", { group: true });
    t.diagnostic(`note stopped ${stopped.ms} ms after the group's SIGINT`);
    // node may get SIGINT twice (from the "terminal" and passed on by npm): one stop, not a forced exit 1.
    assert.deepEqual(stopped.launcherExit, { code: 0, signal: null });
    assertCleanStop(stopped.lines, /^SIGINT: stopping/, { groupSignal: true });
  },
);

test(
  "npx social-ledger serve: SIGTERM to npx's pid stops the service and its embedded PostgreSQL",
  { timeout: 180_000 },
  async (t) => {
    const stopped = await startAndSignal([npmScript("npx"), "social-ledger", "serve"], "SIGTERM");
    t.diagnostic(`note stopped ${stopped.ms} ms after SIGTERM; npx: ${JSON.stringify(stopped.launcherExit)}`);
    // npm passes the signal to its `sh -c`, which dies of it; npm then re-raises it on itself, and
    // the service, no longer npm's, stops by itself.
    assert.equal(stopped.launcherExit.signal, "SIGTERM");
    assertCleanStop(stopped.lines, /^the npm process that started this one is gone: stopping/);
  },
);

test(
  "npx social-ledger serve: a Ctrl-C (SIGINT to the process group) stops the service and its embedded PostgreSQL",
  { timeout: 180_000 },
  async (t) => {
    const stopped = await startAndSignal([npmScript("npx"), "social-ledger", "serve"], "SIGINT", { group: true });
    t.diagnostic(
      `note stopped ${stopped.ms} ms after the group's SIGINT; npx: ${JSON.stringify(stopped.launcherExit)}`,
    );
    assertCleanStop(stopped.lines, /^SIGINT: stopping/, { groupSignal: true });
  },
);
