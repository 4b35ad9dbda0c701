/**
 * Sentences of the docs that said the opposite of the code. docs/api.md said the rate limits
 * lapse while Redis does not answer (the store counts in the process instead:
 * src/cache/rate-limit-store.ts, shown by test/cache/rate-limit.test.ts with Redis killed and
 * stopped) and that a 401 is never limited (test/api/address-limits.test.ts); docs/security.md did
 * not say that webhook receivers get the block and request graph, which the API shows no user.
 * The webhook claim is checked against the event types the code sends.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { EVENT_TYPES } from "../../src/webhooks/webhook-events.ts";

async function section(file: string, heading: string): Promise<string> {
  const text = await readFile(new URL(`../../${file}`, import.meta.url), "utf8");
  const start = text.indexOf(`\n## ${heading}\n`);
  assert.ok(start >= 0, `${file} has a section "${heading}"`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end).replace(/\s+/g, " ");
}

test("docs/api.md, Rate limits: the limits hold while Redis does not answer, and 401s have a budget per client address", async () => {
  const limits = await section("docs/api.md", "Rate limits");
  assert.doesNotMatch(limits, /not limited rather than refused/, "the old claim that the limits lapse");
  assert.match(limits, /While Redis does not answer .* the limits do not lapse/);
  assert.match(limits, /test\/cache\/rate-limit\.test\.ts/, "it names the test that shows it");
  assert.doesNotMatch(limits, /a 401 carries no rate-limit headers/, "the old claim that 401s are never limited");
  assert.match(limits, /LEDGER_AUTH_FAILURES_PER_MINUTE/);
  assert.match(limits, /LEDGER_DOCS_PER_MINUTE/);
});

test("docs/security.md says webhook receivers get the block and request graph, naming each such event type the code sends", async () => {
  const receivers = await section("docs/security.md", "What webhook receivers learn");
  const graphTypes = EVENT_TYPES.filter((type) => type.startsWith("block.") || type.startsWith("follow.request"));
  assert.ok(graphTypes.length >= 4, `the code's block and request event types: ${graphTypes.join(", ")}`);
  for (const type of graphTypes) assert.ok(receivers.includes(`\`${type}\``), `the section names ${type}`);
  assert.match(receivers, /whole block graph and the whole request graph/);
  assert.match(receivers, /admin's decision/);
});
