/**
 * Every audit that runs the feed invariant records its figures in feed_audit_run, which
 * ledger_feed_drift_rows_total sums (docs/feed.md, "Metrics"): the periodic audit, `social-ledger
 * audit` (a real child process) and GET /v1/admin/audit; the feed rebuild records what it changed
 * in feed_rebuild_run, which ledger_feed_rebuild_rows_total sums.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import type { Pool } from "../../src/db/pool.ts";
import { createAccounts, ok, startApi, type ApiHarness } from "../api/harness.ts";
import { childEnv, runCli } from "../cli/cli-child.ts";

/** A CLI child starts tsx on a shared, loaded machine: more than runCli's default. */
const CLI_MS = 180_000;

async function series(h: ApiHarness, name: string): Promise<Record<string, number>> {
  await h.app.metrics.refresh();
  const text = (await h.request("GET", "/metrics")).text;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(new RegExp(`^${name}\\{kind="(\\w+)"\\} (\\d+)$`, "gm"))) out[m[1]!] = Number(m[2]);
  return out;
}

async function auditRuns(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT concat_ws(' ', source, extra, missing) AS r FROM feed_audit_run ORDER BY run_id",
  );
  return rows.map((x) => x.r);
}

test("an inbox row deleted by hand: `social-ledger audit` and GET /v1/admin/audit each record the missing row in feed_audit_run and ledger_feed_drift_rows_total counts both runs; the invariant run without recording (the full audit before) leaves the metric unmoved; the rebuild records the row it added", async (t) => {
  const h = await startApi({ partitions: 2 });
  t.after(() => h.close());
  const pool = h.db.pool;
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["ann", "bob"]);
  const ann = await h.as("ann");
  const bob = await h.as("bob");
  ok(await ann.put("/v1/accounts/me/following/bob"));
  const post = ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "one" }), 201).id;
  await h.drain();
  const env = childEnv({ DATABASE_URL: h.db.url });

  const clean = await runCli(["audit"], env, CLI_MS);
  assert.equal(clean.code, 0, clean.stdout + clean.stderr);
  await incrementalAudit(pool);
  assert.deepEqual(await auditRuns(pool), ["full 0 0", "periodic 0 0"], "a clean run is recorded too");
  assert.deepEqual(await series(h, "ledger_feed_drift_rows_total"), { extra: 0, missing: 0 });

  await pool.query("DELETE FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [post]);

  // Negative control: the invariant alone, as the full audit ran it before, finds the row and records nothing.
  const unrecorded = await auditFeed(pool, h.app.ledger.feed.maxItems);
  assert.equal(unrecorded.missing, 1);
  assert.deepEqual(await series(h, "ledger_feed_drift_rows_total"), { extra: 0, missing: 0 });

  const cli = await runCli(["audit"], env, CLI_MS);
  assert.equal(cli.code, 1, cli.stdout + cli.stderr);
  assert.match(cli.stdout, /^home timelines\s+VIOLATION .*\bmissing=1\b/m);
  const route = ok(await admin.get<{ clean: boolean; feed: { missing: number } }>("/v1/admin/audit"));
  assert.deepEqual([route.clean, route.feed.missing], [false, 1]);
  assert.deepEqual(await auditRuns(pool), ["full 0 0", "periodic 0 0", "full 0 1", "full 0 1"]);
  assert.deepEqual(await series(h, "ledger_feed_drift_rows_total"), { extra: 0, missing: 2 });
  assert.deepEqual(await series(h, "ledger_feed_rebuild_rows_total"), { added: 0, removed: 0 });

  const rebuilt = await runCli(["rebuild", "--kind", "feed", "--items", "ann"], env, CLI_MS);
  assert.equal(rebuilt.code, 0, rebuilt.stdout + rebuilt.stderr);
  assert.match(rebuilt.stdout, /^feed rebuild run 1: 1 reader\(s\) checked, 1 drifted, 1 row\(s\) added, 0 removed$/m);
  const { rows } = await pool.query(
    "SELECT readers_checked, readers_drifted, rows_added, rows_removed FROM feed_rebuild_run ORDER BY run_id",
  );
  assert.deepEqual(rows, [{ readers_checked: 1, readers_drifted: 1, rows_added: 1, rows_removed: 0 }]);
  assert.deepEqual(await series(h, "ledger_feed_rebuild_rows_total"), { added: 1, removed: 0 });
  assert.equal(ok(await admin.get<{ clean: boolean }>("/v1/admin/audit")).clean, true);
  assert.deepEqual(
    await series(h, "ledger_feed_drift_rows_total"),
    { extra: 0, missing: 2 },
    "a clean run adds nothing",
  );
});
