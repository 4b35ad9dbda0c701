/**
 * Every CLI error is one form on stderr, `social-ledger <command>: <message>`, with the exit code
 * the help documents: 2 for bad input or usage (arguments, configuration, an item or post that
 * does not exist), 1 for a failure at run time. Real child processes on a test database.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { childEnv, runCli } from "./cli-child.ts";

const FORM = /^social-ledger( [a-z]+)?: \S/;

test("bad input: one line 'social-ledger <command>: <message>', exit 2", async (t) => {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const env = childEnv({ DATABASE_URL: db.url });
  const cases: { args: string[]; env?: Record<string, string>; stderr: RegExp }[] = [
    { args: ["rebuild", "--items", "ghost"], stderr: /^social-ledger rebuild: unknown item\(s\): ghost$/m },
    {
      args: ["rebuild", "--kind", "comments", "--items", "nope"],
      stderr: /^social-ledger rebuild: unknown post\(s\): nope$/m,
    },
    {
      args: ["migrate"],
      env: { LOG_LEVEL: "verbose" },
      stderr: /^social-ledger migrate: LOG_LEVEL: expected one of .*got "verbose"$/m,
    },
    { args: ["audit", "--bogus"], stderr: /^social-ledger audit: unknown option '--bogus'$/m },
    {
      args: ["import", "/no/such/file.ndjson"],
      stderr: /^social-ledger import: no such file: \/no\/such\/file\.ndjson$/m,
    },
    { args: ["export", "--account", "me"], stderr: /^social-ledger export: account: 'me' is reserved/m },
    { args: ["no-such-command"], stderr: /^social-ledger: unknown command 'no-such-command'$/m },
  ];
  const results = await Promise.all(cases.map((c) => runCli(c.args, { ...env, ...c.env })));
  results.forEach((result, i) => {
    const { args, stderr } = cases[i]!;
    assert.equal(result.code, 2, `${args.join(" ")}: exit code (stderr: ${result.stderr})`);
    assert.match(result.stderr, stderr, `${args.join(" ")}: message`);
    assert.match(result.stderr, FORM, `${args.join(" ")}: the first line has the CLI's form`);
    assert.doesNotMatch(result.stderr, /"level"|\bat \S+:\d+:\d+/, `${args.join(" ")}: no raw logger error or stack`);
  });
});

test("a failure at run time: the same form, exit 1", async () => {
  // Nothing listens on this port: the database cannot be reached.
  const env = childEnv({ DATABASE_URL: `postgres://nobody@127.0.0.1:${await freePort()}/none` });
  const result = await runCli(["audit"], env);
  assert.equal(result.code, 1, result.stderr);
  assert.match(result.stderr, /^social-ledger audit: \S/, result.stderr);
});
