import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { CliChild, childEnv, runCli } from "./cli-child.ts";

/**
 * `serve --metrics-port` moves /metrics off the API's port, and
 * LEDGER_METRICS_TOKEN protects it there too; `token --ttl` refuses a lifetime
 * serve would refuse.
 */

test(
  "serve --metrics-port: /metrics on its own port (bearer token of LEDGER_METRICS_TOKEN), none on the API's port",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-serve-metrics-"));
    const [apiPort, metricsPort] = [await freePort(), await freePort()];
    const token = randomBytes(24).toString("base64url");
    const serve = new CliChild(
      "serve",
      ["serve", "--no-workers", "--port", String(apiPort), "--metrics-port", String(metricsPort)],
      childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dataDir, LEDGER_METRICS_TOKEN: token }),
    );
    t.after(async () => {
      if (serve.alive()) await serve.stop("SIGKILL");
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    await serve.waitFor(new RegExp(`metrics: +http://127\\.0\\.0\\.1:${metricsPort}/metrics`));
    const api = await fetch(`http://127.0.0.1:${apiPort}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(api.status, 404, "no /metrics on the API's port");
    assert.equal((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).status, 401, "no token");
    const scraped = await fetch(`http://127.0.0.1:${metricsPort}/metrics`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(scraped.status, 200);
    const text = await scraped.text();
    assert.match(text, /^ledger_scrape_database_up 1$/m);
    assert.match(text, /^ledger_lag_events\{view="like_count",partition="1"\} 0$/m);
    assert.deepEqual(await serve.stop("SIGTERM"), { code: 0, signal: null }, serve.stderr);
  },
);

test("token --ttl above LEDGER_JWT_MAX_TTL_MS is refused with exit code 2 (serve would refuse the token)", async (t) => {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-token-ttl-"));
  t.after(() => rm(dataDir, { recursive: true, force: true }));
  const env = childEnv({ LEDGER_DATA_DIR: dataDir, LEDGER_JWT_MAX_TTL_MS: "3600000" });
  const refused = await runCli(["token", "alice", "--ttl", "3601"], env);
  assert.equal(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /LEDGER_JWT_MAX_TTL_MS/);
  assert.equal(refused.stdout, "");
  const minted = await runCli(["token", "alice", "--ttl", "3600", "--create-secret"], env);
  assert.equal(minted.code, 0, minted.stderr);
  assert.match(minted.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
});
