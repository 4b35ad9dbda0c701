/**
 * The route tables of README.md ("The API") and docs/api.md ("Routes") name every route the app
 * registers, each with its methods: the routes are read from the app itself (RouteTable), so a
 * route added without a row fails here.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { startApi } from "./harness.ts";

const ROOT = new URL("../../", import.meta.url);

/** The table rows between a heading and the next heading. */
function tableRows(file: string, heading: string): string[] {
  const text = readFileSync(new URL(file, ROOT), "utf8");
  const start = text.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `${file} has the heading ${heading}`);
  const rest = text.slice(start + heading.length + 2);
  const end = rest.search(/\n#{1,6} /);
  return (end < 0 ? rest : rest.slice(0, end)).split("\n").filter((line) => line.startsWith("|"));
}

/** Documented paths, as the app spells them (`{id}` for `:id`), and the methods a row names. */
function documented(rows: string[]): Map<string, Set<string>> {
  const found = new Map<string, Set<string>>();
  for (const row of rows) {
    const methods = new Set(row.match(/\b(GET|PUT|POST|PATCH|DELETE)\b/g) ?? []);
    for (const [, path] of row.matchAll(/`(?:(?:GET|PUT|POST|PATCH|DELETE)`?\/?`?)*\s*(\/[^`?\s]*)/g)) {
      const entry = found.get(path!) ?? new Set<string>();
      for (const m of methods) entry.add(m);
      found.set(path!, entry);
    }
  }
  return found;
}

/** The UI's own pages and assets under /docs, and HEAD/OPTIONS, are not routes a client calls. */
function clientRoutes(routes: { url: string; methods: Set<string> }[]): [string, string[]][] {
  return routes
    .filter((r) => !r.url.startsWith("/docs/") && !r.url.startsWith("/dashboard/"))
    .map(
      (r) =>
        [r.url.replace(/:(\w+)/g, "{$1}"), [...r.methods].filter((m) => m !== "HEAD" && m !== "OPTIONS")] as [
          string,
          string[],
        ],
    )
    .filter(([, methods]) => methods.length > 0);
}

test("README's and docs/api.md's route tables name every registered route with its methods", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  const routes = clientRoutes(api.app.routeTable.all());
  assert.ok(routes.length > 30, `the app registers its routes (${routes.length})`);
  for (const [file, heading] of [
    ["README.md", "### The API"],
    ["docs/api.md", "## Routes"],
  ] as const) {
    const table = documented(tableRows(file, heading));
    const missing = routes.flatMap(([url, methods]) =>
      methods.filter((m) => !table.get(url)?.has(m)).map((m) => `${m} ${url}`),
    );
    assert.deepEqual(missing, [], `${file}: routes missing from the table under "${heading}"`);
  }
});

test("negative control: a table without the comment routes is caught", () => {
  const rows = tableRows("docs/api.md", "## Routes").filter((row) => !row.includes("/comments"));
  const table = documented(rows);
  assert.equal(table.has("/v1/posts/{id}/comments"), false);
});
