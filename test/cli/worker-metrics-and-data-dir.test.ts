/**
 * Operator-facing defects with real processes: a standalone `worker` exposes the
 * same metrics as `serve` (with --metrics-port) and logs in serve's format; a data directory
 * the embedded PostgreSQL cannot reach is refused in one line, before anything is created.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { CliChild, childEnv, runCli } from "./cli-child.ts";

test(
  "defect 6: a standalone worker serves /metrics (serve's names, a 0 failure series per consumer) and logs pino lines like serve",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-worker-metrics-"));
    const port = await freePort();
    const worker = new CliChild(
      "worker",
      ["worker", "--metrics-port", String(port)],
      childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dataDir }),
    );
    t.after(async () => {
      if (worker.alive()) await worker.stop("SIGKILL");
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const started = JSON.parse(await worker.waitFor(/"msg":"started"/)) as Record<string, unknown>;
    assert.equal(started.level, 30, "pino's numeric level, as serve logs");
    assert.equal(typeof started.time, "number");
    assert.equal(started.hostname, os.hostname());
    assert.equal(started.metrics, `http://127.0.0.1:${port}/metrics`);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    assert.match(metrics, /^ledger_consumer_failures_total\{consumer="like_count"\} 0$/m);
    assert.match(metrics, /^ledger_consumer_failures_total\{consumer="follower_projection"\} 0$/m);
    assert.match(metrics, /^ledger_lag_events\{view="like_count",partition="1"\} 0$/m);
    assert.match(metrics, /^ledger_scrape_database_up 1$/m);
    assert.deepEqual(await worker.stop("SIGTERM"), { code: 0, signal: null }, worker.stderr);
    assert.match(worker.lines.at(-1)!, /"msg":"stopped"/);
  },
);

test(
  "defect 10: a data directory the embedded PostgreSQL (user postgres) cannot traverse is refused in one line that says how to fix it, and nothing is created",
  { timeout: 60_000 },
  async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("only root runs the embedded PostgreSQL as another user");
      return;
    }
    const parent = await mkdtemp(path.join(os.tmpdir(), "ledger-private-")); // mode 0700, as mktemp -d makes it
    t.after(() => rm(parent, { recursive: true, force: true }));
    const dataDir = path.join(parent, "data");
    const result = await runCli(["serve"], childEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(await freePort()) }));
    assert.equal(result.code, 1, result.stderr);
    const lines = result.stderr.trim().split("\n");
    assert.equal(lines.length, 1, `one line, no stack trace:\n${result.stderr}`);
    assert.match(lines[0]!, new RegExp(`cannot enter ${parent} \\(mode 0700\\).*chmod o\\+x ${parent}$`));
    assert.equal(existsSync(dataDir), false, "nothing created");
  },
);
