/**
 * What the hot-set race tests (feed-rebuild-heat-race, feed-return-heat-race) share: the heating
 * post batch parked before its commit, the outcome of a run (hot authors, ann's rows of warm, the
 * audit) and the judgement of a fixed run against its negative control.
 */
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import type { Gate, Hooks } from "../../src/hooks.ts";
import { drainFeed, type FeedFixture } from "./fixture.ts";

export async function hotAuthors(pool: Pool): Promise<string[]> {
  return (await pool.query<{ author: string }>("SELECT author FROM feed_hot_author ORDER BY 1")).rows.map(
    (r) => r.author,
  );
}

export async function rowsOfAuthor(pool: Pool, reader: string, author: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM feed_inbox WHERE reader = $1 AND author = $2",
    [reader, author],
  );
  return rows[0]!.n;
}

export interface RaceRun {
  wait: { locktype: string; mode: string } | null;
  audit: Awaited<ReturnType<typeof auditFeed>>;
  warmRows: number;
}

/**
 * warm posts the post that heats it; the post batch that applies it runs to its commit and parks
 * there at `gate` (feed.consumer.beforeCommit). Returns the parked batch (wrapped: an async
 * function's returned promise would be awaited).
 */
export async function parkHeating(fx: FeedFixture, hooks: Hooks, gate: Gate): Promise<{ heating: Promise<unknown> }> {
  await fx.ledger.posts.createPost("warm", "PUBLIC", "the post that heats");
  hooks.on("feed.consumer.beforeCommit", gate.handler);
  const heating = fx.ledger.feed.consumer("posts").pollOnce([0]);
  const parked = await gate.waitArrived();
  assert.equal(parked.source, "posts");
  return { heating };
}

/** After the race, with every gate released: warm is hot; once drained, the audit and ann's rows of warm. */
export async function raceOutcome<W extends RaceRun["wait"]>(fx: FeedFixture, wait: W): Promise<RaceRun & { wait: W }> {
  assert.deepEqual(await hotAuthors(fx.db.pool), ["warm"]);
  await drainFeed(fx.ledger);
  return {
    wait,
    audit: await auditFeed(fx.db.pool, fx.ledger.feed.maxItems),
    warmRows: await rowsOfAuthor(fx.db.pool, "ann", "warm"),
  };
}

/**
 * The fixed run waited for the hot set's lock in `waitMode` and left no row of the hot author, audit
 * clean; the negative control left `controlRows` of them and the audit counts exactly those `extra`.
 */
export function judgeHeatRace(
  fixed: RaceRun,
  control: RaceRun,
  expect: { waitMode: "ExclusiveLock" | "ShareLock"; waitMessage: string; controlRows: number; controlMessage: string },
): void {
  assert.deepEqual([fixed.wait?.locktype, fixed.wait?.mode], ["advisory", expect.waitMode], expect.waitMessage);
  assert.equal(fixed.warmRows, 0);
  assert.deepEqual([fixed.audit.extra, fixed.audit.missing], [0, 0], JSON.stringify(fixed.audit));
  assert.equal(control.warmRows, expect.controlRows, expect.controlMessage);
  assert.deepEqual(
    [control.audit.extra, control.audit.missing, control.audit.explainedByPending],
    [expect.controlRows, 0, 0],
    JSON.stringify(control.audit),
  );
}
