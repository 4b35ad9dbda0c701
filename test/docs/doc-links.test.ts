/**
 * Every doc the code and the docs point a reader at exists, and so does the section named: a
 * `docs/<name>.md` path (with its `#anchor` or a `, "Section title"` after it) in src/, test/,
 * scripts/, bench/, README.md and docs/ (not in the migrations: they are history, never edited),
 * and every relative Markdown link of README.md and docs/*.md.
 * A citation of a missing file or section is a dead end for a newcomer.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync, existsSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");

function filesUnder(dir: string, exts: string[]): string[] {
  const abs = path.join(ROOT, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && exts.some((x) => e.name.endsWith(x)))
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)))
    .sort();
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2, ... */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let inFence = false;
  for (const line of markdown.split("\n")) {
    if (/^\s*```/.test(line)) inFence = !inFence;
    const m = inFence ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, "")
      .replace(/ /g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** A section named in prose: a heading that starts with the title, or a paragraph opening with it (bold or plain). */
export function hasSection(markdown: string, title: string): boolean {
  const t = title.toLowerCase();
  return markdown.split("\n").some((l) => {
    const heading = /^#{1,6}\s+(.*?)\s*$/.exec(l)?.[1];
    if (heading !== undefined) return heading.replace(/`/g, "").toLowerCase().startsWith(t);
    const line = l.toLowerCase();
    return line.includes(`**${t}`) || line.startsWith(t);
  });
}

interface Citation {
  from: string;
  line: number;
  target: string;
  anchor?: string;
  title?: string;
}

/** Cites of docs/<name>.md anywhere in a file, plus relative links when the file is Markdown. */
export function citations(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    for (const m of line.matchAll(/(?<![\w/.-])docs\/([\w./-]+\.md)(?:#([\w-]+))?(?:,?\s*"([A-Za-z`][^"]*)")?/g)) {
      found.push({ from: file, line: i + 1, target: path.join("docs", m[1]!), anchor: m[2], title: m[3] });
    }
    if (!file.endsWith(".md")) return;
    for (const m of line.matchAll(/\]\(([^)\s]*)\)/g)) {
      const href = m[1]!;
      if (/^[a-z]+:/.test(href)) continue;
      const [p, anchor] = href.split("#");
      if (p === "" && anchor !== undefined) {
        found.push({ from: file, line: i + 1, target: file, anchor });
      } else if (p!.endsWith(".md")) {
        found.push({ from: file, line: i + 1, target: path.normalize(path.join(path.dirname(file), p!)), anchor });
      } else if (p) {
        found.push({ from: file, line: i + 1, target: path.normalize(path.join(path.dirname(file), p)) });
      }
    }
  });
  return found;
}

function deadCitations(): string[] {
  const files = [
    ...filesUnder("src", [".ts", ".sql"]).filter((f) => !f.startsWith("src/db/migrations/")),
    // this file's own controls cite missing docs on purpose
    ...filesUnder("test", [".ts"]).filter((f) => f !== path.relative(ROOT, import.meta.filename)),
    ...filesUnder("scripts", [".ts"]),
    ...filesUnder("bench", [".ts"]),
    ...filesUnder("docs", [".md"]),
    "README.md",
  ];
  const dead: string[] = [];
  for (const file of files) {
    for (const c of citations(file, readFileSync(path.join(ROOT, file), "utf8"))) {
      const where = `${c.from}:${c.line}`;
      const abs = path.join(ROOT, c.target);
      if (!existsSync(abs)) {
        dead.push(`${where} cites ${c.target}, which does not exist`);
        continue;
      }
      if (!c.target.endsWith(".md")) continue;
      const markdown = readFileSync(abs, "utf8");
      if (c.anchor && !headingAnchors(markdown).has(c.anchor))
        dead.push(`${where} cites ${c.target}#${c.anchor}: no such heading`);
      if (c.title && !hasSection(markdown, c.title))
        dead.push(`${where} cites ${c.target}, "${c.title}": no such heading`);
    }
  }
  return dead;
}

test("headingAnchors makes GitHub's anchors", () => {
  const anchors = headingAnchors(
    "# The write path\n## Lock order: why it cannot deadlock\n```\n# not a heading\n```\n## The write path\n",
  );
  assert.deepEqual([...anchors], ["the-write-path", "lock-order-why-it-cannot-deadlock", "the-write-path-1"]);
});

test("a citation of a missing doc, a missing anchor or a missing section title is found (control)", () => {
  const cites = citations("src/x.ts", 'see docs/no-such.md and docs/testing.md#nowhere and docs/testing.md, "Nowhere"');
  assert.deepEqual(
    cites.map((c) => [c.target, c.anchor, c.title]),
    [
      ["docs/no-such.md", undefined, undefined],
      ["docs/testing.md", "nowhere", undefined],
      ["docs/testing.md", undefined, "Nowhere"],
    ],
  );
  assert.equal(hasSection("## Group commit (measured)\n", "Group commit"), true);
  assert.equal(hasSection("**What a hook point costs production.** It is...\n", "What a hook point costs"), true);
  assert.equal(hasSection("## Group commit\n", "Lanes"), false);
  const md = citations("docs/a.md", "[b](b.md#x) [c](#y) [d](../src/hooks.ts) [e](https://example.org/z.md)");
  assert.deepEqual(
    md.map((c) => [c.target, c.anchor]),
    [
      ["docs/b.md", "x"],
      ["docs/a.md", "y"],
      ["src/hooks.ts", undefined],
    ],
  );
});

test("every doc, anchor and section cited in src/, test/, scripts/, bench/, README.md and docs/ exists", () => {
  const dead = deadCitations();
  assert.deepEqual(dead, [], `dead citations:\n${dead.join("\n")}`);
});

test("docs/README.md's index links every doc in docs/", () => {
  const index = readFileSync(path.join(ROOT, "docs/README.md"), "utf8");
  const linked = new Set(citations("docs/README.md", index).map((c) => c.target));
  const unlisted = filesUnder("docs", [".md"])
    .filter((f) => path.dirname(f) === "docs" && f !== "docs/README.md")
    .filter((f) => !linked.has(f));
  assert.deepEqual(unlisted, [], `docs missing from the index of docs/README.md: ${unlisted.join(", ")}`);
});
