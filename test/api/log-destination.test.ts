import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

/**
 * The service's stdout log is written once per event-loop turn (src/api/log-destination.ts):
 * lines logged in a turn that ends the process (process.exit, an uncaught exception) must still
 * be written, in order. Each case runs in a child process whose stdout is read whole. The
 * negative control drops the exit flush and sees the lines lost: the check can see the bug.
 */
const destination = new URL("../../src/api/log-destination.ts", import.meta.url).href;

function run(body: string): { stdout: string; status: number | null } {
  const script = `import { batchedStdout } from ${JSON.stringify(destination)};\nconst log = batchedStdout();\n${body}`;
  const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  return { stdout: child.stdout, status: child.status };
}

test("lines logged in the turn that calls process.exit are written, in order", () => {
  const { stdout, status } = run(`for (let i = 0; i < 3; i++) log.write("line " + i + "\\n");\nprocess.exit(3);`);
  assert.equal(status, 3);
  assert.equal(stdout, "line 0\nline 1\nline 2\n");
});

test("lines logged before an uncaught exception are written, and later turns' lines after earlier ones", () => {
  const { stdout, status } = run(`log.write("first\\n");\nsetImmediate(() => { log.write("second\\n"); throw new Error("boom"); });`);
  assert.equal(status, 1);
  assert.equal(stdout, "first\nsecond\n");
});

test("negative control: without the exit flush, the last turn's lines are lost", () => {
  const { stdout } = run(`log.write("lost\\n");\nprocess.removeAllListeners("exit");\nprocess.exit(0);`);
  assert.equal(stdout, "", "the check above would see this loss");
});
