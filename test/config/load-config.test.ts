import assert from "node:assert/strict";
import { test } from "node:test";
import { configWarnings, loadConfig } from "../../src/config.ts";
import { InvalidInputError } from "../../src/errors.ts";

/** The environment is the operator's input: a value we cannot read is refused by name, never guessed. */

function refused(env: NodeJS.ProcessEnv, field: string): void {
  assert.throws(
    () => loadConfig(env),
    (err: unknown) => {
      assert.ok(err instanceof InvalidInputError, `expected InvalidInputError, got ${String(err)}`);
      assert.equal(err.code, "INVALID_INPUT");
      assert.equal(err.field, field);
      assert.match(err.message, new RegExp(`^${field}: `));
      return true;
    },
  );
}

test("config: the embedded defaults need no variable", () => {
  const c = loadConfig({});
  assert.equal(c.databaseUrl, undefined);
  assert.equal(c.port, 8080);
  assert.equal(c.partitions, undefined);
  assert.deepEqual(c.corsOrigins, []);
  assert.equal(c.redisUrl, undefined);
  assert.equal(c.redisAllowEviction, false);
});

test("config: LEDGER_CORS_ORIGINS is a comma-separated list of origins (blanks and spaces ignored) or *", () => {
  assert.deepEqual(loadConfig({ LEDGER_CORS_ORIGINS: "" }).corsOrigins, []);
  assert.deepEqual(loadConfig({ LEDGER_CORS_ORIGINS: "*" }).corsOrigins, ["*"]);
  assert.deepEqual(
    loadConfig({ LEDGER_CORS_ORIGINS: " https://app.example.com , ,http://localhost:5173," }).corsOrigins,
    ["https://app.example.com", "http://localhost:5173"],
  );
  for (const bad of [
    "app.example.com",
    "https://app.example.com/",
    "https://app.example.com/path",
    "ftp://x.example.com",
    "https://a b",
  ]) {
    refused({ LEDGER_CORS_ORIGINS: bad }, "LEDGER_CORS_ORIGINS");
  }
});

test("config: integers outside their range or not integers are refused by name", () => {
  assert.equal(loadConfig({ PORT: "9000" }).port, 9000);
  assert.equal(loadConfig({ LEDGER_PARTITIONS: "4" }).partitions, 4);
  for (const bad of ["0", "65536", "80.5", "eighty", "-1"]) refused({ PORT: bad }, "PORT");
  for (const bad of ["0", "1025", "x"]) refused({ LEDGER_PARTITIONS: bad }, "LEDGER_PARTITIONS");
  refused({ LEDGER_COUNT_BUCKETS: "0" }, "LEDGER_COUNT_BUCKETS");
  refused({ LEDGER_RECONCILE_INTERVAL_MS: "99" }, "LEDGER_RECONCILE_INTERVAL_MS");
});

test("config: a switch is 1/true/yes or 0/false/no; anything else is refused instead of silently meaning off", () => {
  for (const on of ["1", "true", "TRUE", "yes"])
    assert.equal(loadConfig({ LEDGER_REDIS_ALLOW_EVICTION: on }).redisAllowEviction, true, on);
  for (const off of ["0", "false", "no", ""])
    assert.equal(loadConfig({ LEDGER_REDIS_ALLOW_EVICTION: off }).redisAllowEviction, false, off);
  refused({ LEDGER_REDIS_ALLOW_EVICTION: "on please" }, "LEDGER_REDIS_ALLOW_EVICTION");
});

test("config: the background pacing is a budget in ms (0: fixed batches) and a duty share in 0.05..1; anything else is refused by name", () => {
  assert.deepEqual(loadConfig({}).pacing, { budgetMs: 10, duty: 0.5 });
  assert.deepEqual(loadConfig({ LEDGER_BACKGROUND_BATCH_MS: "0", LEDGER_BACKGROUND_DUTY: "1" }).pacing, {
    budgetMs: 0,
    duty: 1,
  });
  assert.equal(loadConfig({ LEDGER_BACKGROUND_DUTY: "0.25" }).pacing.duty, 0.25);
  for (const bad of ["0", "0.01", "1.5", "half", " ", "-0.5"])
    refused({ LEDGER_BACKGROUND_DUTY: bad }, "LEDGER_BACKGROUND_DUTY");
  for (const bad of ["-1", "2.5", "10001"]) refused({ LEDGER_BACKGROUND_BATCH_MS: bad }, "LEDGER_BACKGROUND_BATCH_MS");
});

test("config: every connection's wait has a documented default, 0 turns a deadline off, a bad value is refused by name", () => {
  const c = loadConfig({});
  assert.deepEqual(c.postgres, { connectTimeoutMs: 5000, queryTimeoutMs: 10000, keepAliveMs: 10000, idleMs: 10000 });
  assert.deepEqual([c.redisCommandTimeoutMs, c.redisKeepAliveMs], [200, 10000]);
  assert.deepEqual(
    loadConfig({ LEDGER_PG_QUERY_TIMEOUT_MS: "0", LEDGER_PG_CONNECT_TIMEOUT_MS: "0", LEDGER_PG_KEEPALIVE_MS: "0" })
      .postgres,
    { connectTimeoutMs: 0, queryTimeoutMs: 0, keepAliveMs: 0, idleMs: 10000 },
  );
  refused({ LEDGER_PG_QUERY_TIMEOUT_MS: "10s" }, "LEDGER_PG_QUERY_TIMEOUT_MS");
  refused({ LEDGER_PG_IDLE_MS: "0" }, "LEDGER_PG_IDLE_MS");
  refused({ LEDGER_REDIS_COMMAND_TIMEOUT_MS: "-1" }, "LEDGER_REDIS_COMMAND_TIMEOUT_MS");
});

test("config: a retention margin shorter than the periodic audit's period is warned about; at or above it, or with either job off, nothing", () => {
  assert.deepEqual(configWarnings(loadConfig({})), [], "the defaults: a day kept, an audit every 5 minutes");
  const short = configWarnings(
    loadConfig({ LEDGER_RETENTION_KEEP_MS: "30000", LEDGER_AUDIT_EVERY_MS: "300000", LEDGER_PRUNE_EVERY_MS: "20000" }),
  );
  assert.equal(short.length, 1);
  assert.match(short[0]!, /^LEDGER_RETENTION_KEEP_MS \(30000\) is shorter than LEDGER_AUDIT_EVERY_MS \(300000\)/);
  assert.match(short[0]!, /full form/);
  for (const env of [
    { LEDGER_RETENTION_KEEP_MS: "300000", LEDGER_AUDIT_EVERY_MS: "300000" },
    { LEDGER_RETENTION_KEEP_MS: "30000", LEDGER_AUDIT_EVERY_MS: "0" },
    { LEDGER_RETENTION_KEEP_MS: "30000", LEDGER_AUDIT_EVERY_MS: "300000", LEDGER_PRUNE_EVERY_MS: "0" },
  ])
    assert.deepEqual(configWarnings(loadConfig(env)), [], JSON.stringify(env));
});
