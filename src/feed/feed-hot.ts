import type { PoolClient } from "../db/pool.ts";
import type { PlanRow } from "./feed-consumer.ts";
import { CHANGE_HOT_SET_SQL } from "./feed-sources.ts";

/** The default of LEDGER_FEED_HOT_FOLLOWERS: the follower count from which an author's posts are merged at read time. */
export const DEFAULT_FEED_HOT_FOLLOWERS = 10_000;

const JUDGE_SQL = "SELECT author, hot FROM feed_judge_hot_authors($1::text[], $2::int)";
const TRANSITION_SQL =
  "SELECT op, reader, post_id, author FROM feed_hot_transition_plan($1::text[], $2::text[], $3::int)";

/**
 * Judges a post batch's authors against the threshold (feed_judge_hot_authors: the follower count
 * projection, recorded in feed_hot_author) and returns the plan of the authors whose state changed
 * (feed_hot_transition_plan): a heated author's rows leave its followers' inboxes, a cooled
 * author's posts are merged into them. Called with the authors' feed locks held and before the
 * batch's own plan is read, so that plan (feed_truth) already follows the new state. A change takes
 * the hot set's lock exclusive (CHANGE_HOT_SET_SQL) before the transition's plan is read, so an
 * install of a reader's truth racing it is ordered with it (docs/feed.md, "Hot authors").
 */
export async function judgeHotAuthors(
  client: PoolClient,
  authors: readonly string[],
  threshold: number,
  maxItems: number,
): Promise<PlanRow[]> {
  if (authors.length === 0) return [];
  const { rows } = await client.query<{ author: string; hot: boolean }>(JUDGE_SQL, [authors, threshold]);
  if (rows.length === 0) return [];
  // Waits for the installs reading the hot set now; the plan below sees the rows they committed.
  await client.query(CHANGE_HOT_SET_SQL);
  const heated = rows.filter((r) => r.hot).map((r) => r.author);
  const cooled = rows.filter((r) => !r.hot).map((r) => r.author);
  return (await client.query<PlanRow>(TRANSITION_SQL, [heated, cooled, maxItems])).rows;
}
