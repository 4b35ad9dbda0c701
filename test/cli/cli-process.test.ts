/**
 * The CLI as a user runs it: `social-ledger` child processes on a fresh data directory (the
 * embedded default: the first `serve` initialises and starts PostgreSQL 16 there). A token is
 * minted, a like made over real HTTP, the count read until it is not stale, the other commands
 * run against the running server's cluster (audit fails on a corrupted count, rebuild repairs
 * it and reports the drift), the server stopped with SIGTERM (its PostgreSQL
 * with it) and started again on the same directory: the like is still there.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile, readdir } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import { createPool } from "../../src/db/pool.ts";
import { embeddedSuperuserUrl } from "../../src/runtime/embedded-access.ts";
import { childEnv, httpClient, pollUntil, postmasterPid, processAlive, runCli } from "./cli-child.ts";
import { serveLab } from "./serve-lab.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const COMMANDS = ["serve", "worker", "migrate", "rebuild", "audit", "token"] as const;

test("--help of every command exits 0 and names the command", async () => {
  const results = await Promise.all([
    runCli(["--help"], childEnv({})),
    ...COMMANDS.map((command) => runCli([command, "--help"], childEnv({}))),
  ]);
  const [top, ...perCommand] = results;
  assert.equal(top!.code, 0, top!.stderr);
  for (const command of COMMANDS)
    assert.match(top!.stdout, new RegExp(`^  ${command}\\b`, "m"), `top-level help lists ${command}`);
  perCommand.forEach((result, i) => {
    const command = COMMANDS[i]!;
    assert.equal(result.code, 0, `${command} --help: ${result.stderr}`);
    assert.match(
      result.stdout,
      new RegExp(`^Usage: social-ledger ${command}\\b`, "m"),
      `${command} --help names the command`,
    );
    assert.equal(result.stderr, "");
  });
});

test("bad arguments: a message on stderr, exit code 2, nothing written", async (t) => {
  const { dataDir, env } = await serveLab(t, "ledger-cli-args-", { LOG_LEVEL: "warn" });
  const cases: { args: string[]; stderr: RegExp }[] = [
    { args: ["token", "bad id"], stderr: /userId/ },
    { args: ["token", "x".repeat(129)], stderr: /userId/ },
    { args: ["token", "alice", "--ttl", "0"], stderr: /--ttl/ },
    { args: ["token", "me"], stderr: /userId: 'me' is reserved/ },
    { args: ["worker", "--partitions", "x"], stderr: /--partitions/ },
    { args: ["worker", "--partitions", "0,,1"], stderr: /--partitions/ },
    { args: ["rebuild", "--items", "a,bad id"], stderr: /itemId/ },
    { args: ["serve", "--port", "70000"], stderr: /--port/ },
    { args: ["audit", "--bogus"], stderr: /unknown option/ },
    { args: ["no-such-command"], stderr: /unknown command/ },
  ];
  const results = await Promise.all(cases.map((c) => runCli(c.args, env)));
  results.forEach((result, i) => {
    const { args, stderr } = cases[i]!;
    assert.equal(result.code, 2, `${args.join(" ")}: exit code (stderr: ${result.stderr})`);
    assert.match(result.stderr, stderr, `${args.join(" ")}: message`);
    assert.equal(result.stdout, "", `${args.join(" ")}: nothing on stdout`);
  });
  assert.deepEqual(await readdir(dataDir), [], "nothing was written to the data directory");
});

test(
  "serve on a fresh data dir: token, like over HTTP, count caught up, audit, SIGTERM, restart keeps the like",
  { timeout: 120_000 },
  async (t) => {
    const { dataDir, env, serve } = await serveLab(t, "ledger-cli-serve-", { LOG_LEVEL: "warn" });
    const pgData = path.join(dataDir, "pg");

    const [admin, alice] = await Promise.all([
      runCli(["token", "admin", "--admin", "--create-secret"], env),
      runCli(["token", "alice", "--create-secret"], env),
    ]);
    for (const minted of [admin, alice]) {
      assert.equal(minted.code, 0, minted.stderr);
      assert.match(minted.stdout, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$/, "only the token on stdout");
      const claims = JSON.parse(Buffer.from(minted.stdout.split(".")[1]!, "base64url").toString("utf8")) as {
        exp: number;
        iat: number;
      };
      assert.equal(claims.exp - claims.iat, 30 * 24 * 3600, "a minted token expires, by default after 30 days");
    }
    const adminToken = admin.stdout.trim();
    const aliceToken = alice.stdout.trim();

    const started = Date.now();
    const server1 = serve("serve#1");
    const address = LISTENING.exec(await server1.waitFor(LISTENING, 90_000))![1]!;
    t.diagnostic(`note serve#1 listening on ${address} after ${Date.now() - started} ms (initdb + start + migrate)`);
    assert.match(
      server1.errorLines.join("\n"),
      /database: {2}embedded PostgreSQL 16, data in /,
      "the banner is on stderr",
    );
    assert.ok(
      server1.lines.every((l) => l.startsWith("{")),
      "stdout holds only JSON log lines",
    );
    const pgPid = postmasterPid(pgData);
    assert.ok(pgPid !== undefined && processAlive(pgPid), "serve started the embedded PostgreSQL");

    const http = httpClient(address);
    assert.equal((await http("PUT", "/v1/items/x", adminToken)).status, 200);
    const liked = await http("PUT", "/v1/items/x/likes/me", aliceToken);
    assert.equal(liked.status, 200);
    assert.deepEqual(liked.body, { outcome: "CHANGED", liked: true, version: 1, seq: 1 });
    const count = await pollUntil(
      "like count caught up",
      async () =>
        (
          await http<{ count: number; stale: boolean; lag: number }>(
            "GET",
            "/v1/items/x/like-count?allowedLag=0",
            aliceToken,
          )
        ).body,
      (c) => c.stale === false && c.count === 1,
      20_000,
    );
    assert.equal(count.lag, 0);

    // The other commands find the running server's cluster through the port file.
    const [audit, auditJson, migrate, rebuild] = await Promise.all([
      runCli(["audit"], env),
      runCli(["audit", "--json"], env),
      runCli(["migrate"], env),
      runCli(["rebuild", "--json"], env),
    ]);
    assert.equal(audit.code, 0, audit.stdout + audit.stderr);
    assert.match(audit.stdout, /^clean: no violation$/m);
    assert.equal(auditJson.code, 0, auditJson.stderr);
    assert.equal((JSON.parse(auditJson.stdout) as { clean: boolean }).clean, true);
    assert.equal(migrate.code, 0, migrate.stderr);
    const migrated = JSON.parse(migrate.stdout) as {
      latest: number;
      applied: number;
      pending: number;
      appliedNow: string[];
      database: string;
    };
    assert.equal(migrated.pending, 0);
    assert.equal(migrated.applied, migrated.latest);
    assert.deepEqual(migrated.appliedNow, [], "serve had already applied everything");
    assert.match(migrated.database, /already running/);
    assert.equal(rebuild.code, 0, rebuild.stderr);
    const report = JSON.parse(rebuild.stdout) as { itemsChecked: number; totalAbsDrift: number };
    assert.equal(report.itemsChecked, 1);
    assert.equal(report.totalAbsDrift, 0);
    assert.equal(postmasterPid(pgData), pgPid, "the commands left the server's cluster running");

    // A count written wrongly behind the ledger's back: audit fails (exit 1), rebuild repairs and reports it.
    const port = Number((await readFile(path.join(dataDir, "pg-port"), "utf8")).trim());
    const pool = createPool({ connectionString: await embeddedSuperuserUrl(dataDir, port), max: 1 });
    try {
      await pool.query("UPDATE like_count SET n = n + 2 WHERE item_id = 'x' AND part = 0");
    } finally {
      await pool.end();
    }
    const broken = await runCli(["audit"], env);
    assert.equal(broken.code, 1, broken.stdout + broken.stderr);
    assert.match(broken.stdout, /^likes read side +VIOLATION /m);
    assert.match(broken.stdout, /^NOT CLEAN/m);
    const repaired = await runCli(["rebuild", "--items", "x"], env);
    assert.equal(repaired.code, 0, repaired.stderr);
    assert.match(repaired.stdout, /^rebuild run \d+: 1 item\(s\) checked, 1 drifted, total \|drift\| 2$/m);
    assert.match(repaired.stdout, /^ {2}x: 3 -> 1 \(drift -2\)$/m);
    assert.equal((await runCli(["audit"], env)).code, 0, "clean again after the rebuild");

    const exit1 = await server1.stop("SIGTERM");
    assert.deepEqual(exit1, { code: 0, signal: null }, server1.stderr);
    assert.equal(processAlive(pgPid), false, "the embedded PostgreSQL stopped with the server");
    assert.equal(postmasterPid(pgData), undefined, "clean shutdown removed postmaster.pid");

    const server2 = serve("serve#2");
    const address2 = LISTENING.exec(await server2.waitFor(LISTENING, 60_000))![1]!;
    const http2 = httpClient(address2);
    const mine = await http2("GET", "/v1/items/x/likes/me", aliceToken);
    assert.equal(mine.status, 200);
    assert.deepEqual(mine.body, { liked: true, version: 1 });
    const after = await http2<{ count: number; stale: boolean }>(
      "GET",
      "/v1/items/x/like-count?allowedLag=0",
      aliceToken,
    );
    assert.equal(after.status, 200);
    assert.equal(after.body.count, 1);
    assert.equal(after.body.stale, false);
    const pgPid2 = postmasterPid(pgData)!;
    assert.deepEqual(await server2.stop("SIGTERM"), { code: 0, signal: null }, server2.stderr);
    assert.equal(processAlive(pgPid2), false);
  },
);

test(
  "serve whose port is taken exits non-zero with the reason and leaves no PostgreSQL running on its data dir",
  { timeout: 120_000 },
  async (t) => {
    const { dataDir, env } = await serveLab(t, "ledger-cli-port-taken-", { LOG_LEVEL: "warn" });
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(Number(env.PORT), "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => holder.close(() => resolve())));

    const failed = await runCli(["serve"], env, 90_000);
    assert.notEqual(failed.code, 0, "a serve that cannot listen fails");
    assert.match(failed.stderr + failed.stdout, /EADDRINUSE/, "and says why");
    // The failed start had initialised and started the embedded cluster: it must have stopped it.
    const pgPid = postmasterPid(path.join(dataDir, "pg"));
    assert.ok(pgPid === undefined || !processAlive(pgPid), `the embedded postmaster (pid ${pgPid}) was left running`);
  },
);
