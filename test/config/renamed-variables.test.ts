/**
 * Every duration variable is in milliseconds (`_MS`). The variables renamed to that scheme are still
 * read under their old `_SECONDS` names, scaled, with a warning; a duration the service keeps in
 * whole seconds refuses a fraction of a second instead of rounding it.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ENVIRONMENT, RENAMED_VARIABLES, loadConfig, withRenamedVariables } from "../../src/config.ts";
import { loadTransportConfig } from "../../src/transport/transport-config.ts";
import { InvalidInputError } from "../../src/errors.ts";
import { childEnv, runCli } from "../cli/cli-child.ts";

test("every duration variable is in ms, and every renamed one is in the table under its new name", () => {
  const durations = ENVIRONMENT.filter((v) => /_(SECONDS|MINUTES|HOURS|S)$/.test(v.name)).map((v) => v.name);
  assert.deepEqual(durations, [], "no duration in another unit");
  const names = new Set(ENVIRONMENT.map((v) => v.name));
  for (const { old, name } of RENAMED_VARIABLES) {
    assert.ok(names.has(name), `${name} is in the table`);
    assert.ok(!names.has(old), `${old} is not`);
  }
});

test("an old name is read scaled to ms with a warning; the new name wins when both are set", () => {
  const { env, warnings } = withRenamedVariables({
    LEDGER_PRUNE_EVERY_SECONDS: "30",
    LEDGER_AUDIT_EVERY_SECONDS: "5",
    LEDGER_AUDIT_EVERY_MS: "7000",
  });
  assert.equal(env.LEDGER_PRUNE_EVERY_MS, "30000");
  assert.equal(env.LEDGER_PRUNE_EVERY_SECONDS, undefined);
  assert.equal(env.LEDGER_AUDIT_EVERY_MS, "7000");
  assert.equal(warnings.length, 2);
  assert.match(warnings[0]!, /LEDGER_PRUNE_EVERY_SECONDS was renamed LEDGER_PRUNE_EVERY_MS/);
  assert.match(warnings[1]!, /LEDGER_AUDIT_EVERY_SECONDS is ignored: LEDGER_AUDIT_EVERY_MS is set/);
  assert.equal(loadConfig(env).pruneEverySeconds, 30);

  // A value that is not a number is carried over as written, so the new name's reader refuses it by name.
  const bad = withRenamedVariables({ LEDGER_PRUNE_EVERY_SECONDS: "soon" }).env;
  assert.throws(
    () => loadConfig(bad),
    (err: unknown) => err instanceof InvalidInputError && err.field === "LEDGER_PRUNE_EVERY_MS",
  );
});

test("a duration kept in whole seconds refuses a fraction of a second (by name) rather than rounding it", () => {
  for (const [env, field] of [
    [{ LEDGER_PRUNE_EVERY_MS: "1500" }, "LEDGER_PRUNE_EVERY_MS"],
    [{ LEDGER_JWT_MAX_TTL_MS: "999" }, "LEDGER_JWT_MAX_TTL_MS"],
  ] as const) {
    assert.throws(
      () => loadConfig(env),
      (err: unknown) =>
        err instanceof InvalidInputError && err.field === field && /multiple of 1000|integer in/.test(err.message),
      field,
    );
  }
  assert.equal(loadConfig({ LEDGER_RETENTION_KEEP_MS: "60000" }).retention.keepSeconds, 60);
  assert.equal(
    loadTransportConfig({ NATS_URL: "nats://127.0.0.1:4222", LEDGER_NATS_DUPLICATE_WINDOW_MS: "30000" })
      .duplicateWindowSeconds,
    30,
  );
});

test("the CLI reads an old name with a warning on stderr: token --ttl is bounded by LEDGER_JWT_MAX_TTL_SECONDS as by its new name", async () => {
  const env = childEnv({ LEDGER_JWT_SECRET: "x".repeat(64), LEDGER_JWT_MAX_TTL_SECONDS: "3600" });
  const refused = await runCli(["token", "alice", "--ttl", "7200"], env);
  assert.equal(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /warning: LEDGER_JWT_MAX_TTL_SECONDS was renamed LEDGER_JWT_MAX_TTL_MS/);
  assert.match(refused.stderr, /at most 3600 s \(LEDGER_JWT_MAX_TTL_MS=3600000\)/);
  const minted = await runCli(["token", "alice", "--ttl", "600"], env);
  assert.equal(minted.code, 0, minted.stderr);
});
