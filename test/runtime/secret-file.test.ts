import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { readOrCreateSecret } from "../../src/runtime/secret.ts";

const PROCESSES = 6;
const DIRS = 200;

/** Starts one secret-child and resolves with it once it says it is ready. */
async function startChild(base: string): Promise<{ go(): void; values: Promise<Map<number, string>> }> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", path.join(import.meta.dirname, "secret-child.ts"), base, String(DIRS)],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout });
  const values = new Map<number, string>();
  let readyFn: () => void;
  const ready = new Promise<void>((resolve) => (readyFn = resolve));
  const done = new Promise<Map<number, string>>((resolve, reject) => {
    lines.on("line", (line) => {
      if (line === "ready") return readyFn();
      const { dir, value } = JSON.parse(line) as { dir: number; value: string };
      values.set(dir, value);
    });
    child.on("exit", (code) => (code === 0 ? resolve(values) : reject(new Error(`secret-child exited ${code}`))));
  });
  await ready;
  return { go: () => child.stdin.end("go\n"), values: done };
}

// Two `token` commands on a fresh data directory once read jwt-secret while the other was still
// writing it ("Zero-length key is not supported"): the file had been created before its value
// was written. Several processes race through the same fresh directories here; in every one
// they must all read one whole value.
test(`a secret created by ${PROCESSES} processes racing through ${DIRS} fresh directories: in each, every process reads one whole value`, async () => {
  const base = await mkdtemp(path.join(tmpdir(), "secret-race-"));
  try {
    const children = await Promise.all(Array.from({ length: PROCESSES }, () => startChild(base)));
    for (const c of children) c.go();
    const results = await Promise.all(children.map((c) => c.values));
    const bad: string[] = [];
    for (let dir = 0; dir < DIRS; dir++) {
      const seen = new Set(results.map((r) => r.get(dir)));
      const [value] = seen;
      if (seen.size !== 1 || value === undefined || value.length < 43)
        bad.push(`dir ${dir}: ${[...seen].map((v) => JSON.stringify(v)).join(", ")}`);
    }
    assert.deepEqual(
      bad,
      [],
      `directories where the processes did not all read one whole secret (${bad.length} of ${DIRS})`,
    );
    assert.equal((await stat(path.join(base, "0", "s"))).mode & 0o777, 0o600);
    assert.deepEqual(await readdir(path.join(base, "0")), ["s"], "no draft file is left");
    assert.equal(
      await readOrCreateSecret(path.join(base, "0"), "s"),
      results[0]!.get(0),
      "a later caller reads the same value",
    );
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
