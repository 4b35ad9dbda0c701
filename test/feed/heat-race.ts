/**
 * What the hot-set race tests (feed-rebuild-heat-race, feed-return-heat-race) read and judge: the
 * hot authors, a reader's rows of one author, and a fixed run against its negative control.
 */
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import type { auditFeed } from "../../src/feed/feed-audit.ts";

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
