/**
 * `npm start`'s stdout is the service's log, one JSON object per line: npm's own
 * "> social-ledger@0.1.0 start" banner goes to stderr (.npmrc), as does the service's banner.
 * A real `npm start` child on a test database, stopped with SIGTERM after it listens.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { realpathSync } from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { LineChild, withDeadline } from "../support/line-child.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { childEnv, REPO_ROOT } from "./cli-child.ts";

/** npm's own script (npm-cli.js), run under this node like every other child of the tests. */
function npmCli(): string {
  const npm = realpathSync(execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim());
  return path.join(path.dirname(npm), "npm-cli.js");
}

test("npm start: every stdout line is a JSON object, npm's banner is not among them", { timeout: 90_000 }, async (t) => {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const env = childEnv({ DATABASE_URL: db.url, PORT: String(await freePort()), LOG_LEVEL: "info" });
  const child = new LineChild("npm start", [npmCli(), "start"], { cwd: REPO_ROOT, env });
  t.after(async () => {
    if (child.alive()) await child.stop("SIGKILL");
  });
  await child.waitFor(/^social-ledger listening on http/);
  // A request, so a line the service writes after it listens is among those read.
  const address = /listening on (\S+)/.exec(child.errorLines.find((l) => l.includes("listening on"))!)![1]!;
  assert.equal((await fetch(`${address}/healthz`)).status, 200);
  // npm forwards a signal to the shell of the script, not to the service: the service's own pid
  // (every log line carries it) is stopped, and npm exits after it.
  const servicePid = Number(/"pid":(\d+)/.exec(child.lines.find((l) => l.includes('"pid":')) ?? "")?.[1]);
  assert.ok(servicePid > 0, `the service's pid is in its log (stdout: ${child.lines.join("\n")})`);
  process.kill(servicePid, "SIGTERM");
  const exit = await withDeadline(child.exited, 30_000, () => child.failure("did not exit after the service's SIGTERM").message);
  assert.equal(exit.code, 0, child.stderr);
  assert.ok(child.lines.length > 0, `the log has lines (stderr: ${child.stderr})`);
  for (const line of child.lines) {
    assert.doesNotThrow(() => assert.equal(typeof JSON.parse(line), "object"), `not a JSON line: ${JSON.stringify(line)}`);
  }
  assert.match(child.stderr, /> social-ledger@\S+ start/, "npm's banner went to stderr");
});
