/**
 * The document served at /openapi.json passes Redocly's `recommended` rules (redocly.yaml) with
 * no error and no warning. The CLI runs offline: telemetry and the update check are off, and the
 * document has no external $ref, so nothing is fetched.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startApi } from "./harness.ts";

const REDOCLY = join(import.meta.dirname, "../../node_modules/.bin/redocly");
const CONFIG = join(import.meta.dirname, "../../redocly.yaml");
const OFFLINE = { REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_UPDATE_NOTIFIER: "1" };

/** `redocly lint` of a document: its exit code and what it printed. */
export async function redoclyLint(doc: unknown): Promise<{ code: number; output: string }> {
  const dir = await mkdtemp(join(tmpdir(), "openapi-lint-"));
  try {
    const file = join(dir, "openapi.json");
    await writeFile(file, JSON.stringify(doc, null, 1));
    return await new Promise((resolve) => {
      execFile(
        REDOCLY,
        ["lint", file, "--config", CONFIG, "--format", "stylish", "--max-problems", "200"],
        { env: { ...process.env, ...OFFLINE }, timeout: 120_000 },
        (err, stdout, stderr) => {
          resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, output: `${stdout}${stderr}` });
        },
      );
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("openapi lint: /openapi.json has no error and no warning under Redocly's recommended rules; a broken document (negative control) is reported", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (await h.request<Record<string, unknown>>("GET", "/openapi.json")).body;
  const clean = await redoclyLint(doc);
  assert.equal(clean.code, 0, clean.output);
  // A problem is a line "line:col  error|warning  rule  message" (stylish format).
  assert.doesNotMatch(clean.output, /^\s*\d+:\d+\s+(error|warning)\s/m, clean.output);
  assert.match(clean.output, /Your API description is valid/, clean.output);

  // The check can fail: without servers and license it reports an error and a warning.
  const broken = { ...doc, servers: undefined, info: { ...(doc.info as object), license: undefined } };
  const report = await redoclyLint(JSON.parse(JSON.stringify(broken)));
  assert.notEqual(report.code, 0, report.output);
  assert.match(report.output, /no-empty-servers/, report.output);
  assert.match(report.output, /info-license/, report.output);
});
