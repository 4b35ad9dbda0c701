import { test } from "node:test";
import assert from "node:assert/strict";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { createAccounts, ok, startApi, type ApiHarness } from "../api/harness.ts";

interface Page {
  entries: { post: { id: string } }[];
  lag: number;
  complete: boolean;
}

/** The value of one series of /metrics after a refresh (the figures are read from the database on a timer). */
async function metric(h: ApiHarness, series: RegExp): Promise<number[]> {
  await h.app.metrics.refresh();
  const text = (await h.request("GET", "/metrics")).text;
  return [...text.matchAll(series)].map((m) => Number(m[1]));
}

test("api: /metrics shows the feed's lag per source outbox, the drift the periodic audit found (a skipped absent reader's missing rows are not drift, a lie in a complete inbox is) and the readers fan-out skips; a returning reader's page is installed (200, complete) or, past LEDGER_FEED_RETURN_REBUILD_MS, answered 206 with complete: false and Retry-After", async (t) => {
  const h = await startApi({ partitions: 2, feedReturnRebuildMs: 300 });
  t.after(() => h.close());
  const pool = h.db.pool;
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["ann", "bob"]);
  const ann = await h.as("ann");
  const bob = await h.as("bob");

  const lag = /^ledger_lag_events\{view="feed_(?:posts|relations)",partition="\d"\} (\d+)$/gm;
  ok(await ann.put("/v1/accounts/me/following/bob"));
  const first = ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "FOLLOWERS", body: "one" }), 201).id;
  const pending = await metric(h, lag);
  assert.equal(pending.length, 4, "two sources × two partitions");
  assert.equal(
    pending.reduce((a, b) => a + b, 0),
    2,
    "the follow and the post are pending for the feed",
  );
  await h.drain();
  assert.deepEqual(
    (await metric(h, lag)).filter((n) => n > 0),
    [],
  );
  const drift = /^ledger_feed_drift_rows_total\{kind="(?:extra|missing)"\} (\d+)$/gm;
  const skipped = /^ledger_feed_skipped_readers (\d+)$/gm;
  assert.deepEqual(await metric(h, drift), [0, 0], "zero series before any audit");

  // ann goes absent; bob's next post skips her inbox.
  await pool.query("UPDATE feed_reader SET last_read_at = now() - interval '8 days' WHERE reader = 'ann'");
  const second = ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "FOLLOWERS", body: "two" }), 201).id;
  await h.drain();
  assert.deepEqual(await metric(h, skipped), [1]);
  await incrementalAudit(pool);
  assert.deepEqual(await metric(h, drift), [0, 0], "the skipped inbox's missing row is not drift");

  // A lie in bob's complete inbox is.
  await pool.query("DELETE FROM feed_inbox WHERE reader = 'bob' AND post_id = $1", [first]);
  await incrementalAudit(pool);
  assert.deepEqual(await metric(h, drift), [0, 1], "extra 0, missing 1");
  await h.app.ledger.feedRebuild.rebuild({ readers: ["bob"] });

  // ann returns while something holds her row past the bound: 206, what the inbox holds so far, nothing committed.
  const holder = await pool.connect();
  try {
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM feed_reader WHERE reader = 'ann' FOR UPDATE");
    const late = await ann.get<Page>("/v1/timelines/home");
    assert.equal(late.status, 206, late.text);
    assert.equal(late.body.complete, false);
    assert.equal(late.headers.get("retry-after"), "1");
    assert.deepEqual(
      late.body.entries.map((e) => e.post.id),
      [first],
    );
  } finally {
    await holder.query("ROLLBACK");
    holder.release();
  }
  assert.deepEqual(await metric(h, skipped), [1], "still skipped: the bounded install rolled back");

  const page = ok(await ann.get<Page>("/v1/timelines/home"));
  assert.equal(page.complete, true);
  assert.deepEqual(
    page.entries.map((e) => e.post.id),
    [second, first],
  );
  assert.deepEqual(await metric(h, skipped), [0]);
  assert.equal((await ann.get("/v1/timelines/home?cursor=bad")).status, 400, "a bad cursor is refused");
});
