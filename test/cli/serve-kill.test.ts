/**
 * `kill -9` of the service loses nothing acknowledged. The server's embedded PostgreSQL
 * survives its owner as an orphan; the next `serve` on the same data directory finds the owner
 * dead, shuts the orphan down, starts the cluster as its own, and every like the first server
 * acknowledged is there.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { CliChild, childEnv, httpClient, pollUntil, postmasterPid, processAlive, runCli } from "./cli-child.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const LIKERS = 20;

test("serve killed with -9: the next serve adopts the data directory and every acknowledged like is there", { timeout: 150_000 }, async (t) => {
  const dataDir = await clusterTempDir("ledger-cli-kill9-");
  const pgData = path.join(dataDir, "pg");
  const env = childEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(await freePort()), LOG_LEVEL: "warn" });
  const children: CliChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    const pgPid = postmasterPid(pgData);
    if (pgPid !== undefined && processAlive(pgPid)) {
      process.kill(pgPid, "SIGQUIT");
      await pollUntil("leftover postmaster gone", async () => processAlive(pgPid), (isAlive) => !isAlive, 15_000);
    }
    await rm(dataDir, { recursive: true, force: true });
  });
  const token = async (user: string, admin = false) => (await runCli(["token", user, ...(admin ? ["--admin"] : [])], env)).stdout.trim();

  const server1 = new CliChild("serve#1", ["serve"], env);
  children.push(server1);
  const address = LISTENING.exec(await server1.waitFor(LISTENING, 90_000))![1]!;
  const call = httpClient(address);
  assert.equal((await call("PUT", "/v1/items/hot", await token("root", true))).status, 200);
  const acknowledged: string[] = [];
  for (let i = 0; i < LIKERS; i++) {
    const user = `fan-${i}`;
    const res = await call("PUT", "/v1/items/hot/likes/me", await token(user));
    if (res.status === 200) acknowledged.push(user);
  }
  assert.equal(acknowledged.length, LIKERS);
  const orphan = postmasterPid(pgData)!;
  assert.deepEqual(await server1.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
  t.diagnostic(`note serve#1 killed -9 after ${acknowledged.length} acknowledged likes; its PostgreSQL pid ${orphan} alive=${processAlive(orphan)}`);
  assert.ok(processAlive(orphan), "the killed server's PostgreSQL is orphaned, still running");

  const server2 = new CliChild("serve#2", ["serve"], env);
  children.push(server2);
  const address2 = LISTENING.exec(await server2.waitFor(LISTENING, 90_000))![1]!;
  assert.equal(processAlive(orphan), false, "the orphan was shut down");
  const adopted = postmasterPid(pgData)!;
  assert.notEqual(adopted, orphan);
  const call2 = httpClient(address2);
  for (const user of acknowledged) {
    const res = await call2<{ liked: boolean }>("GET", "/v1/items/hot/likes/me", await token(user));
    assert.deepEqual([res.status, res.body.liked], [200, true], user);
  }
  const reader = await token("reader");
  const count = await pollUntil("count caught up", () => call2<{ count: number; stale: boolean }>("GET", "/v1/items/hot/like-count?allowedLag=0", reader),
    (res) => res.body.count === LIKERS && !res.body.stale, 60_000);
  t.diagnostic(`note serve#2 adopted the data dir (PostgreSQL pid ${adopted}); likes found=${acknowledged.length}/${LIKERS}; count=${count.body.count}`);
  assert.equal((await runCli(["audit"], env)).code, 0);
  assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
  assert.equal(processAlive(adopted), false, "the adopted PostgreSQL stopped with serve#2");
});
