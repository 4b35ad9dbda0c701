import type { PoolClient } from "../db/pool.ts";
import { ID_PATTERN, MAX_ID_LENGTH } from "../ids.ts";

/** A body notifies at most this many mentioned accounts (the first distinct `@id`s, in body order). */
export const MAX_MENTIONS = 20;

/**
 * `@` then a run of id characters (src/ids.ts), where the `@` does not continue a word or an id
 * (so `ann@example.org` mentions no one). Ids may contain `@`, `.`, `:`, `-`, so the run is as long
 * as the id rules allow; the recorder tries it with trailing punctuation removed too.
 */
const MENTION = /(?<![A-Za-z0-9._:@-])@([A-Za-z0-9][A-Za-z0-9._:@-]*)/g;
const TRAILING_PUNCTUATION = /[._:@-]+$/;

/**
 * The mentions of a body, each as its candidate ids, longest first: `@bob.` is `bob.` if that
 * account exists, else `bob` (a sentence's full stop). At most MAX_MENTIONS, distinct, in order;
 * a run longer than an id can be mentions no one.
 */
export function parseMentions(body: string): string[][] {
  const mentions: string[][] = [];
  const seen = new Set<string>();
  for (const m of body.matchAll(MENTION)) {
    const run = m[1]!;
    if (run.length > MAX_ID_LENGTH || seen.has(run)) continue;
    seen.add(run);
    const stripped = run.replace(TRAILING_PUNCTUATION, "");
    const candidates = stripped !== run && ID_PATTERN.test(stripped) ? [run, stripped] : [run];
    mentions.push(candidates);
    if (mentions.length === MAX_MENTIONS) break;
  }
  return mentions;
}

/**
 * Records the mentions of a post or comment just written (`itemId`, its item row already
 * inserted), on the writer's transaction: each mention names the longest of its candidates that
 * is an account, and is recorded only for an account that is not erased, is not the writer, and
 * may read the item in the truth now (item_state: the post's visibility, blocks either way with
 * the post's and the comment's author). The mention table is what the notifications derive from
 * (docs/notifications.md). Returns the accounts recorded.
 */
export async function recordMentions(
  client: PoolClient,
  itemId: string,
  writer: string,
  body: string,
): Promise<string[]> {
  const mentions = parseMentions(body);
  if (mentions.length === 0) return [];
  const { rows } = await client.query<{ account: string }>(
    `WITH cand AS (
       SELECT c.k, c.candidates FROM unnest($3::text[]) WITH ORDINALITY AS c(candidates, k)),
     named AS (
       SELECT DISTINCT ON (m.k) a.account_id, a.erased_state
         FROM (SELECT k, string_to_array(candidates, ' ') AS ids FROM cand) m
         CROSS JOIN LATERAL unnest(m.ids) WITH ORDINALITY AS i(id, pos)
         JOIN account a ON a.account_id = i.id
        ORDER BY m.k, i.pos)
     INSERT INTO mention (item_id, account)
     SELECT $1, n.account_id FROM named n
      WHERE n.erased_state IS NULL AND n.account_id <> $2 AND item_state(n.account_id, $1, 'TRUTH') = 'VISIBLE'
      ORDER BY n.account_id
     ON CONFLICT DO NOTHING
     RETURNING account`,
    [itemId, writer, mentions.map((c) => c.join(" "))],
  );
  return rows.map((r) => r.account).sort();
}
