/**
 * The transport's command line: without NATS_URL (or with a bad setting) `relay --transport nats` and
 * `worker --transport nats` exit 2 with a message naming the variable, before they open the database.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { childEnv, runCli } from "../cli/cli-child.ts";

test("relay and worker --transport nats refuse a missing NATS_URL or a bad LEDGER_NATS_* value with exit 2", async () => {
  // An unreachable database: the commands must fail on the configuration before they try it.
  const env = childEnv({ DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" });
  delete env.NATS_URL;
  for (const args of [
    ["relay", "--transport", "nats"],
    ["worker", "--transport", "nats"],
  ]) {
    const missing = await runCli(args, env);
    assert.equal(missing.code, 2, missing.stderr);
    assert.match(missing.stderr, /NATS_URL/);
    const bad = await runCli(args, { ...env, NATS_URL: "nats://127.0.0.1:1", LEDGER_NATS_MAX_DELIVER: "1" });
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /LEDGER_NATS_MAX_DELIVER must be an integer in 2\.\.1000/);
  }
  const relayWithoutTransport = await runCli(["relay"], env);
  assert.equal(relayWithoutTransport.code, 2);
  assert.match(relayWithoutTransport.stderr, /--transport/);
});
