/**
 * The drift of a database rebuild run by another process (`social-ledger rebuild` as a
 * child) shows on the service's /metrics, with its kind, sign and origin, because the histogram
 * is rebuilt from count_drift_history at scrape; the HTTP route's rebuild feeds the same figures.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createAccounts, ok, startApi, type ApiHarness } from "../api/harness.ts";
import { childEnv, runCli } from "../cli/cli-child.ts";

/** Moves one partition's row of an item's like count behind the ledger's back. */
async function corrupt(h: ApiHarness, item: string, by: number): Promise<void> {
  await h.db.pool.query(
    "UPDATE like_count SET n = n + $2 WHERE item_id = $1 AND part = (SELECT min(part) FROM like_count WHERE item_id = $1)",
    [item, by],
  );
}

/** The drift histogram's _count and _sum of one label set on the service's /metrics (0, 0 when absent). */
async function driftFigures(h: ApiHarness, labels: string): Promise<{ count: number; sum: number }> {
  await h.app.metrics.refresh(); // the histogram is rebuilt from the database on a timer, not by the scrape
  const text = (await h.request("GET", "/metrics")).text;
  const pick = (suffix: string) => {
    const match = new RegExp(`^ledger_count_drift_${suffix}\\{${labels}\\} (\\S+)$`, "m").exec(text);
    return match ? Number(match[1]) : 0;
  };
  return { count: pick("count"), sum: pick("sum") };
}

test(
  "a rebuild run by the CLI in another process shows on the service's /metrics: drift with its kind, sign and origin; the HTTP route's rebuild adds to the same figures",
  { timeout: 120_000 },
  async (t) => {
    const h = await startApi({ partitions: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-drift-metrics-"));
    t.after(async () => {
      await h.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const admin = await h.as("admin-1", { admin: true });
    for (const item of ["item-over", "item-under", "item-route"]) ok(await admin.put(`/v1/items/${item}`));
    for (let u = 0; u < 4; u++) {
      const user = await h.as(`user-${u}`);
      for (const item of ["item-over", "item-under", "item-route"]) ok(await user.put(`/v1/items/${item}/likes/me`));
    }
    await h.drain();
    await corrupt(h, "item-over", 5); // shows 9 for 4 likes: drift -5, "over"
    await corrupt(h, "item-under", -2); // shows 2: drift +2, "under"

    const over = 'kind="likes",sign="over",origin="rebuild"';
    const under = 'kind="likes",sign="under",origin="rebuild"';
    // Negative control: before the CLI's rebuild the service shows no rebuild drift, so what follows is the CLI's.
    assert.deepEqual(await driftFigures(h, over), { count: 0, sum: 0 });
    assert.deepEqual(await driftFigures(h, under), { count: 0, sum: 0 });

    const cli = await runCli(
      ["rebuild", "--items", "item-over,item-under"],
      childEnv({ DATABASE_URL: h.db.url, LEDGER_DATA_DIR: dataDir }),
    );
    assert.equal(cli.code, 0, cli.stderr);
    t.diagnostic(`note rebuild child: ${cli.stdout.trim().split("\n").join(" | ")}`);
    assert.match(cli.stdout, /item-over: 9 -> 4 \(drift -5\)/);
    assert.match(cli.stdout, /item-under: 2 -> 4 \(drift \+2\)/);
    assert.deepEqual(
      await driftFigures(h, over),
      { count: 1, sum: 5 },
      "the CLI's overcount on the service's /metrics",
    );
    assert.deepEqual(
      await driftFigures(h, under),
      { count: 1, sum: 2 },
      "the CLI's undercount on the service's /metrics",
    );
    assert.match(
      (await h.request("GET", "/metrics")).text,
      /^ledger_count_drift_bucket\{le="2",kind="likes",sign="under",origin="rebuild"\} 1$/m,
    );

    await corrupt(h, "item-route", 3);
    const route = ok(await admin.post<{ totalAbsDrift: number }>("/v1/admin/rebuild", { items: ["item-route"] }));
    assert.equal(route.totalAbsDrift, 3);
    assert.deepEqual(
      await driftFigures(h, over),
      { count: 2, sum: 8 },
      "the route's rebuild adds to the same histogram, counted once",
    );
    const { rows } = await h.db.pool.query<{ target: string; drift: number }>(
      "SELECT target, drift::int AS drift FROM count_drift_history WHERE origin = 'rebuild' ORDER BY target",
    );
    assert.deepEqual(rows, [
      { target: "item-over", drift: -5 },
      { target: "item-route", drift: -3 },
      { target: "item-under", drift: 2 },
    ]);
  },
);

test(
  "social-ledger rebuild --kind comments repairs comment counts in another process and its drift shows on the service's /metrics as kind comments",
  { timeout: 120_000 },
  async (t) => {
    const h = await startApi({ partitions: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-drift-comments-"));
    t.after(async () => {
      await h.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const admin = await h.as("admin-1", { admin: true });
    await createAccounts(admin, ["alice", "bob"]);
    const alice = await h.as("alice");
    const bob = await h.as("bob");
    const post = ok<{ id: string }>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "p" }), 201);
    for (let i = 0; i < 3; i++) ok(await bob.post(`/v1/posts/${post.id}/comments`, { body: `c${i}` }), 201);
    await h.drain();
    await h.db.pool.query(
      "UPDATE comment_count SET n = n + 4 WHERE post_id = $1 AND part = (SELECT min(part) FROM comment_count WHERE post_id = $1)",
      [post.id],
    );

    const over = 'kind="comments",sign="over",origin="rebuild"';
    assert.deepEqual(await driftFigures(h, over), { count: 0, sum: 0 }, "nothing before the CLI ran");
    const env = childEnv({ DATABASE_URL: h.db.url, LEDGER_DATA_DIR: dataDir });
    const refused = await runCli(["rebuild", "--kind", "bookmarks"], env);
    assert.equal(refused.code, 2, "an unknown kind is a usage error");
    const cli = await runCli(["rebuild", "--kind", "comments", "--items", post.id], env);
    assert.equal(cli.code, 0, cli.stderr);
    t.diagnostic(`note rebuild --kind comments: ${cli.stdout.trim().split("\n").join(" | ")}`);
    assert.match(cli.stdout, /1 post\(s\) checked, 1 drifted, total \|drift\| 4/);
    assert.match(cli.stdout, new RegExp(`${post.id}: 7 -> 3 \\(drift -4\\)`));
    assert.deepEqual(await driftFigures(h, over), { count: 1, sum: 4 });
    assert.equal(ok<{ count: number }>(await bob.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`)).count, 3);
  },
);
