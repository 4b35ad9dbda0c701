import assert from "node:assert/strict";
import { test } from "node:test";
import { loadConfig } from "../../src/config.ts";
import { InvalidInputError } from "../../src/errors.ts";
import { formatFreshnessToken, formatLsn, parseFreshnessToken, parseLsn } from "../../src/replicas/wal-position.ts";

test("config: DATABASE_REPLICA_URLS is a comma-separated list of postgres:// URLs; unset means no replicas; the thresholds have defaults and bounds", () => {
  assert.deepEqual(loadConfig({}).replicas, { urls: [], maxLagMs: 5_000, tokenWaitMs: 100, checkEveryMs: 1_000 });
  assert.deepEqual(
    loadConfig({ DATABASE_REPLICA_URLS: " postgres://a@h1:5432/db, ,postgresql://b@h2/db " }).replicas.urls,
    ["postgres://a@h1:5432/db", "postgresql://b@h2/db"],
  );
  for (const [env, field] of [
    [{ DATABASE_REPLICA_URLS: "h1:5432" }, "DATABASE_REPLICA_URLS"],
    [{ LEDGER_REPLICA_MAX_LAG_MS: "-1" }, "LEDGER_REPLICA_MAX_LAG_MS"],
    [{ LEDGER_REPLICA_TOKEN_WAIT_MS: "soon" }, "LEDGER_REPLICA_TOKEN_WAIT_MS"],
    [{ LEDGER_REPLICA_CHECK_MS: "10" }, "LEDGER_REPLICA_CHECK_MS"],
  ] as const) {
    assert.throws(
      () => loadConfig(env),
      (err: unknown) => err instanceof InvalidInputError && err.field === field,
      field,
    );
  }
});

test("freshness tokens: a WAL position round-trips as PostgreSQL prints it and compares as a 64-bit number; anything else is INVALID_INPUT naming the field", () => {
  assert.equal(formatLsn(parseLsn("16/B374D848")), "16/B374D848");
  assert.equal(parseLsn("0/3000060"), 0x3000060n);
  assert.ok(parseLsn("1/0") > parseLsn("0/FFFFFFFF"));
  for (const bad of ["", "0", "0/", "/1", "0/123456789", "g/1", "0/1 ", "-1/0"]) {
    assert.throws(
      () => parseLsn(bad),
      (err: unknown) => err instanceof InvalidInputError && err.field === "freshness",
      JSON.stringify(bad),
    );
  }
});

test("timeline-qualified freshness tokens: <timeline>/<position> round-trips, the position alone is still accepted (no timeline), anything else is INVALID_INPUT naming the field", () => {
  assert.deepEqual(parseFreshnessToken("2/0/16B3748"), { timeline: 2, lsn: 0x16b3748n });
  assert.equal(formatFreshnessToken(parseFreshnessToken("12/16/B374D848")), "12/16/B374D848");
  assert.deepEqual(parseFreshnessToken("0/16B3748"), { timeline: undefined, lsn: 0x16b3748n });
  assert.equal(formatFreshnessToken(parseFreshnessToken("0/16B3748")), "0/16B3748");
  for (const bad of ["0/0/1", "01/0/1", "4294967296/0/1", "1//0/1", "1/0/1/2", "x/0/1", "1/0/", "-1/0/1"]) {
    assert.throws(
      () => parseFreshnessToken(bad),
      (err: unknown) => err instanceof InvalidInputError && err.field === "freshness",
      JSON.stringify(bad),
    );
  }
});
