/**
 * One table of environment variables (ENVIRONMENT in src/config.ts): `social-ledger --help`
 * prints it, README.md's variable tables list the same names with the same defaults, and
 * every variable the source reads is in it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { ENVIRONMENT } from "../../src/config.ts";
import { childEnv, REPO_ROOT, runCli } from "../cli/cli-child.ts";

const table = new Map(ENVIRONMENT.map((v) => [v.name, v.shown]));

/** `| \`NAME\` | \`default\` | meaning |` rows of every README table headed "variable | default | meaning". */
function readmeVariables(): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of readFileSync(path.join(REPO_ROOT, "README.md"), "utf8").split("\n")) {
    const m = /^\| `([A-Z][A-Z0-9_]+)` \| ([^|]+) \|/.exec(line);
    if (m) rows.set(m[1]!, m[2]!.trim().replaceAll("`", ""));
  }
  return rows;
}

/** NAME -> default of the help's "Environment" block. */
function helpVariables(help: string): Map<string, string> {
  const block = help.slice(help.indexOf("Environment (name, default, meaning):"));
  const rows = new Map<string, string>();
  for (const m of block.matchAll(/^ {2}([A-Z][A-Z0-9_]+) +(\S+) {2,}\S/gm)) rows.set(m[1]!, m[2]!);
  return rows;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : [],
  );
}

test("--help lists every variable of the config table with its default, and nothing else", async () => {
  const result = await runCli(["--help"], childEnv({}));
  assert.equal(result.code, 0, result.stderr);
  assert.deepEqual(Object.fromEntries(helpVariables(result.stdout)), Object.fromEntries(table));
  assert.match(result.stdout, /^ {2}LEDGER_PARTITIONS +16 /m, "the service's P of a new database");
});

test("README's variable tables list the config table's variables with the same defaults", () => {
  assert.deepEqual(Object.fromEntries([...readmeVariables()].sort()), Object.fromEntries([...table].sort()));
});

test("every environment variable the source reads is in the config table", () => {
  const read = new Set<string>();
  for (const file of sourceFiles(path.join(REPO_ROOT, "src"))) {
    for (const m of readFileSync(file, "utf8").matchAll(/\benv\.([A-Z][A-Z0-9_]+)/g)) read.add(m[1]!);
  }
  assert.ok(read.size > 20, `the scan finds the reads (${read.size})`);
  assert.deepEqual([...read].filter((name) => !table.has(name)).sort(), []);
});

test("negative control: a help that says LEDGER_PARTITIONS (4) is caught", () => {
  const wrong = "Environment (name, default, meaning):\n  LEDGER_PARTITIONS  4  partition count\n";
  assert.notEqual(helpVariables(wrong).get("LEDGER_PARTITIONS"), table.get("LEDGER_PARTITIONS"));
});

test("the tuning knobs are listed apart, as advanced settings, in the help and in the README", async () => {
  const advanced = ENVIRONMENT.filter((v) => v.advanced).map((v) => v.name);
  assert.ok(advanced.length > 20, `the table marks the knobs (${advanced.length})`);
  const result = await runCli(["--help"], childEnv({}));
  const helpBlock = result.stdout.slice(result.stdout.indexOf("Advanced settings"), result.stdout.indexOf("Errors:"));
  assert.deepEqual([...helpVariables(`Environment (name, default, meaning):\n${helpBlock}`).keys()], advanced);
  const readme = readFileSync(path.join(REPO_ROOT, "README.md"), "utf8");
  const readmeBlock = readme.slice(readme.indexOf("**Advanced settings.**"));
  const table = readmeBlock.slice(0, readmeBlock.indexOf("\n\n", readmeBlock.indexOf("| variable |")));
  assert.deepEqual(
    [...table.matchAll(/^\| `([A-Z][A-Z0-9_]+)` \|/gm)].map((m) => m[1]),
    advanced,
  );
});
