/**
 * stdout of the README's npm commands carries the service's log or the command's data, nothing
 * of npm's (.npmrc): `npm start`'s stdout is one JSON object per line, without npm's
 * "> social-ledger@0.1.0 start" banner; a failing `npx social-ledger ...` or `npm start` leaves
 * stdout empty (in json mode npm wrote its {"error":...} object there: into `export > out.ndjson`,
 * into the log). Real `npm`/`npx` children (npm's own scripts under this node) on test databases.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { LineChild, withDeadline } from "../support/line-child.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { npmScript, REPO_ROOT, userEnv, type CliResult } from "./cli-child.ts";

/** Runs `node <npm script> ...args` to its end (bounded). */
async function runNpm(args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exit = await withDeadline(
    new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on("close", (code, signal) => resolve({ code, signal })),
    ),
    90_000,
    () => `${args.join(" ")}\nstdout:\n${stdout}\nstderr:\n${stderr}`,
  );
  return { ...exit, stdout, stderr };
}

test(
  "npm start: every stdout line is a JSON object, npm's banner is not among them",
  { timeout: 90_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2 });
    t.after(() => db.close());
    const env = userEnv({ DATABASE_URL: db.url, PORT: String(await freePort()), LOG_LEVEL: "info" });
    const child = new LineChild("npm start", [npmScript("npm"), "start"], { cwd: REPO_ROOT, env });
    t.after(async () => {
      if (child.alive()) await child.stop("SIGKILL");
    });
    await child.waitFor(/^social-ledger listening on http/);
    // A request, so a line the service writes after it listens is among those read.
    const address = /listening on (\S+)/.exec(child.errorLines.find((l) => l.includes("listening on"))!)![1]!;
    assert.equal((await fetch(`${address}/healthz`)).status, 200);
    const exit = await child.stop("SIGTERM");
    assert.equal(exit.code, 0, child.stderr);
    assert.ok(child.lines.length > 0, `the log has lines (stderr: ${child.stderr})`);
    for (const line of child.lines) {
      assert.doesNotThrow(
        () => assert.equal(typeof JSON.parse(line), "object"),
        `not a JSON line: ${JSON.stringify(line)}`,
      );
    }
    assert.doesNotMatch(
      `${child.lines.join("\n")}\n${child.stderr}`,
      /> social-ledger@\S+ start/,
      "npm's banner is not printed",
    );
  },
);

test(
  "a failing npx social-ledger or npm start writes nothing of npm's on stdout: export --account nobody > out.ndjson stays empty",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2 });
    t.after(() => db.close());
    const env = userEnv({ DATABASE_URL: db.url });
    const exported = await runNpm([npmScript("npx"), "social-ledger", "export", "--account", "nobody"], env);
    assert.equal(exported.code, 2, exported.stderr);
    assert.equal(exported.stdout, "", "stdout of a failed export");
    assert.match(exported.stderr, /^social-ledger export: unknown account: nobody$/m);

    const started = await runNpm([npmScript("npm"), "start"], userEnv({ DATABASE_URL: db.url, LOG_LEVEL: "loud" }));
    assert.equal(started.code, 2, started.stderr);
    assert.equal(started.stdout, "", "stdout of a failed start");
    assert.match(started.stderr, /LOG_LEVEL/);
  },
);
