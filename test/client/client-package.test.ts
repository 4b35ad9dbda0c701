/**
 * The client package (clients/typescript) is in step with the service and installable:
 * its generated files are what `npm run client:generate` makes of the document the service
 * serves now, and `npm pack` of it installs into an empty project whose TypeScript compiles
 * against its types and whose node drives a running service through it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ERROR_CODES_BY_STATUS } from "../../src/api/openapi.ts";
import { generateClientFiles } from "../../clients/typescript/scripts/generate.ts";
import { startApi } from "../api/harness.ts";

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, "../..");
const CLIENT = join(ROOT, "clients/typescript");
const REGENERATE = "npm run client:generate";

/** The first generated file that differs from the committed one, with the command that fixes it. */
async function drift(generated: Map<string, string>): Promise<string | undefined> {
  for (const [name, text] of generated) {
    const committed = await readFile(join(CLIENT, "src", name), "utf8").catch(() => "");
    if (committed !== text)
      return `clients/typescript/src/${name} differs from the service's document: run ${REGENERATE}`;
  }
  return undefined;
}

test("client in step: the generated types and error codes are what the served document makes; a changed route is caught (negative control)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (
    await h.request<{ paths: Record<string, unknown>; info: { license: { name: string } } }>("GET", "/openapi.json")
  ).body;
  assert.equal(await drift(await generateClientFiles(doc, ERROR_CODES_BY_STATUS)), undefined);

  // The document's license is the package's (LICENSE, package.json) and the client's.
  const rootPackage = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as { license: string };
  const clientPackage = JSON.parse(await readFile(join(CLIENT, "package.json"), "utf8")) as { license: string };
  assert.equal(doc.info.license.name, rootPackage.license);
  assert.equal(clientPackage.license, rootPackage.license);

  // Negative controls: a route the client does not know, and an error code it does not list.
  const fewerPaths = Object.fromEntries(Object.entries(doc.paths).filter(([path]) => path !== "/v1/posts/{id}"));
  assert.match(
    (await drift(await generateClientFiles({ ...doc, paths: fewerPaths }, ERROR_CODES_BY_STATUS))) ?? "",
    /schema\.ts differs.*client:generate/,
  );
  const moreCodes = { ...ERROR_CODES_BY_STATUS, 418: { TEAPOT: "a code the client does not list" } };
  assert.match((await drift(await generateClientFiles(doc, moreCodes))) ?? "", /error-codes\.ts differs/);
});

test("client package: npm pack installs into an empty project, which type-checks against it and calls a running service", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "client-pack-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const quiet = {
    ...process.env,
    npm_config_loglevel: "error",
    npm_config_json: "false",
    npm_config_fund: "false",
    npm_config_audit: "false",
  };
  // prepack builds dist/ with the repository's TypeScript.
  const packed = await run("npm", ["pack", "--pack-destination", dir], { cwd: CLIENT, env: quiet, timeout: 180_000 });
  const tarball = packed.stdout.trim().split("\n").at(-1)!;
  assert.match(tarball, /^social-ledger-client-\d+\.\d+\.\d+\.tgz$/);

  const app = join(dir, "app");
  await run("mkdir", [app]);
  await writeFile(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  await run("npm", ["install", join(dir, tarball)], { cwd: app, env: quiet, timeout: 180_000 });

  const h = await startApi();
  t.after(() => h.close());
  const token = await h.token("admin", { admin: true });
  const program = [
    'import { createLedgerClient, ERROR_CODES, LedgerApiError } from "@social-ledger/client";',
    "const client = createLedgerClient({ baseUrl: process.argv[2], token: process.argv[3] });",
    'await client.PUT("/v1/items/{id}", { params: { path: { id: "packed" } } });',
    'const { data } = await client.GET("/v1/items/{id}/like-count", { params: { path: { id: "packed" }, query: { exact: true } } });',
    "const count: number = data!.count;",
    'const missing = await client.GET("/v1/posts/{id}", { params: { path: { id: "nope" } } }).catch((e: unknown) => e);',
    "if (!(missing instanceof LedgerApiError)) throw new Error(String(missing));",
    "console.log(JSON.stringify({ count, code: missing.code, status: ERROR_CODES.POST_NOT_FOUND.status }));",
  ].join("\n");
  await writeFile(join(app, "use.mts"), program);
  const tsc = join(ROOT, "node_modules/.bin/tsc");
  const types = ["--types", "node", "--typeRoots", join(ROOT, "node_modules/@types")];
  await run(
    tsc,
    ["--module", "nodenext", "--moduleResolution", "nodenext", "--strict", "--target", "es2022", ...types, "use.mts"],
    {
      cwd: app,
      timeout: 120_000,
    },
  );
  const out = await run(process.execPath, ["use.mjs", h.baseUrl, token], { cwd: app, timeout: 60_000 });
  assert.deepEqual(JSON.parse(out.stdout), { count: 0, code: "POST_NOT_FOUND", status: 404 });
});
