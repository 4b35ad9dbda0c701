/**
 * docs/spec-cases.md explains every case id a test is named by: each test file whose name starts
 * with a case id (`32-hi-partitioned.test.ts`) is listed there, and each case id a test title
 * opens with (`test("30-beyond-1 ...")`) has a row of its own.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");
const CASE_FILE = /^(3\d)-[\w-]+\.test\.ts$/;
const CASE_TITLE = /\btest\(\s*[`"'](3\d-(?:[A-Z]|beyond-\d+|[a-z]+(?:-[a-z]+)*))\b/g;

function testFiles(): string[] {
  return readdirSync(path.join(ROOT, "test"), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)))
    .sort();
}

/** The rows of the doc's tables: first cell (the case id) and the whole line. */
export function caseRows(doc: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of doc.split("\n")) {
    const m = /^\|\s*(3\d-[\w-]+)\s*\|/.exec(line);
    if (m) rows.set(m[1]!, line);
  }
  return rows;
}

export function missing(doc: string, files: { path: string; text: string }[]): string[] {
  const rows = caseRows(doc);
  const lines = [...rows.values()];
  const out: string[] = [];
  for (const f of files) {
    if (CASE_FILE.test(path.basename(f.path)) && !lines.some((l) => l.includes(`\`${f.path}\``))) {
      out.push(`${f.path} is named by a case id but has no row in docs/spec-cases.md`);
    }
    for (const m of f.text.matchAll(CASE_TITLE)) {
      const id = m[1]!;
      if (!rows.has(id)) out.push(`${f.path}: case id ${id} has no row in docs/spec-cases.md`);
    }
  }
  return [...new Set(out)];
}

test("a test file named by a case id without a row, and a case id in a title without a row, are found (control)", () => {
  const doc = "| 32-C | one CHANGED | `test/likes/32-c-concurrency.test.ts` |\n";
  assert.deepEqual(
    missing(doc, [
      { path: "test/likes/32-c-concurrency.test.ts", text: 'test("32-C P=1 ...", () => {});' },
      { path: "test/likes/32-z-new.test.ts", text: 'test("32-Z P=1 ...", () => {}); test(`30-beyond-9 x`, () => {});' },
    ]),
    [
      "test/likes/32-z-new.test.ts is named by a case id but has no row in docs/spec-cases.md",
      "test/likes/32-z-new.test.ts: case id 32-Z has no row in docs/spec-cases.md",
      "test/likes/32-z-new.test.ts: case id 30-beyond-9 has no row in docs/spec-cases.md",
    ],
  );
});

test("every case id a test file or a test title is named by has a row in docs/spec-cases.md", () => {
  const doc = readFileSync(path.join(ROOT, "docs/spec-cases.md"), "utf8");
  const self = path.relative(ROOT, import.meta.filename);
  const files = testFiles()
    .filter((f) => f !== self)
    .map((f) => ({ path: f, text: readFileSync(path.join(ROOT, f), "utf8") }));
  const gaps = missing(doc, files);
  assert.deepEqual(gaps, [], gaps.join("\n"));
});
