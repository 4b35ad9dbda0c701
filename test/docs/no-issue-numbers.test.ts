/**
 * Docs and comments say what a change means, never which tracker issue asked for it: an "issue N"
 * tells a reader nothing without the tracker. Checked in src/ (not the migrations: they are
 * history, never edited), test/, scripts/, docs/ and README.md. Dated history belongs in
 * docs/decisions/, which cites commits.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");
const ISSUE_NUMBER = /\bissues? #?\d+/i;

function files(dir: string, exts: string[]): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && exts.some((x) => e.name.endsWith(x)))
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)));
}

export function issueNumbers(file: string, text: string): string[] {
  return text
    .split("\n")
    .flatMap((line, i) => (ISSUE_NUMBER.test(line) ? [`${file}:${i + 1}: ${line.trim().slice(0, 120)}`] : []));
}

test("an issue number is found (control)", () => {
  assert.equal(issueNumbers("x.ts", "// fixed for issue 22\n// Issue #7: x\n// no issue here").length, 2);
});

test("no doc or comment cites an issue number", () => {
  const self = path.relative(ROOT, import.meta.filename);
  const all = [
    ...files("src", [".ts", ".sql"]).filter((f) => !f.startsWith("src/db/migrations/")),
    ...files("test", [".ts"]).filter((f) => f !== self),
    ...files("scripts", [".ts"]),
    ...files("docs", [".md"]),
    "README.md",
  ];
  const found = all.flatMap((f) => issueNumbers(f, readFileSync(path.join(ROOT, f), "utf8")));
  assert.deepEqual(found, [], `say what the issue meant instead:\n${found.join("\n")}`);
});
