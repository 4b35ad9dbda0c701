/**
 * The start after a dead database, with real processes: serve told not to restart its embedded
 * PostgreSQL exits 1 for an outside supervisor, and a start right after a kill -9 of the whole
 * process group (dead server and postmaster still zombies) succeeds at the first try; in both the
 * next serve finds every acknowledged write in the facts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { ClusterStartError, EmbeddedCluster } from "../../src/db/embedded-cluster.ts";
import { processState } from "../../src/runtime/process-state.ts";
import { withDeadline } from "../support/line-child.ts";
import { BIN, REPO_ROOT, pollUntil, postmasterPid } from "./cli-child.ts";
import { LikeLoad } from "./like-load.ts";
import {
  CLIENTS,
  ITEMS,
  LISTENING,
  LOAD_BEFORE_FAULT,
  embeddedUrl,
  serve,
  setup,
  verifyNothingLost,
} from "./outage-setup.ts";

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
