import type { Pool, PoolClient } from "../db/pool.ts";
import { DatabaseError } from "../db/errors.ts";
import { backendPid } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { DEFAULT_FEED_MAX_ITEMS, type PlanRow } from "./feed-consumer.ts";
import { LOCK_READERS_SQL, shareHotSet, type HotSetShare } from "./feed-sources.ts";

/** The default of LEDGER_FEED_ABSENT_MS: a reader who has not read for 7 days is absent (as Mastodon's). */
export const DEFAULT_FEED_ABSENT_MS = 7 * 24 * 3_600_000;
/** The default of LEDGER_FEED_RETURN_REBUILD_MS: how long a returning reader's read may spend installing the inbox. */
export const DEFAULT_FEED_RETURN_REBUILD_MS = 2_000;

/**
 * How stale last_read_at may get before a read writes it again: a 24th of the absence (7 h for 7
 * days), so a reader who reads keeps being fanned out to and a read writes at most once per interval.
 */
export function readMarkEveryMs(absentMs: number): number {
  return Math.max(1, Math.floor(absentMs / 24));
}

/** Of a plan's readers (rows locked by the caller), those fan-out skips; marks the newly absent ones skipped. */
export const SKIP_ABSENT_SQL = "SELECT reader FROM feed_skip_absent($1::text[], $2::bigint)";

/**
 * Removes from a plan the 'add' rows of readers who are absent or already skipped, with their
 * feed_reader rows locked by the caller (applyPlanRows): the decision is read after the lock, so
 * it sees a returning reader's rebuild that committed before (docs/feed.md). Removals are kept:
 * a skipped inbox still never holds a row its truth does not.
 */
export async function withoutAbsentReaders(
  client: PoolClient,
  plan: readonly PlanRow[],
  absentMs: number,
): Promise<readonly PlanRow[]> {
  const adding = [...new Set(plan.filter((r) => r.op === "add").map((r) => r.reader))];
  if (adding.length === 0) return plan;
  const { rows } = await client.query<{ reader: string }>(SKIP_ABSENT_SQL, [adding, absentMs]);
  if (rows.length === 0) return plan;
  const skipped = new Set(rows.map((r) => r.reader));
  return plan.filter((r) => r.op === "remove" || !skipped.has(r.reader));
}

/** What a read learned of the reader's inbox: complete, or still being installed (retry after `retryAfterMs`). */
export type ReaderReturn = { complete: true; rebuilt: boolean } | { complete: false; retryAfterMs: number };

const READ_STATE_SQL = `
  SELECT skipped_since IS NOT NULL AS skipped, last_read_at < now() - make_interval(secs => $2::bigint / 1000.0) AS due
    FROM feed_reader WHERE reader = $1`;
const MARK_READ_SQL = `
  UPDATE feed_reader SET last_read_at = now()
   WHERE reader = $1 AND last_read_at < now() - make_interval(secs => $2::bigint / 1000.0)
  RETURNING skipped_since IS NOT NULL AS skipped`;

const BOUND_SQL = "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $1, true)";

/** SQLSTATEs of a bounded rebuild that ran out of time: statement_timeout, lock_timeout. */
const OUT_OF_TIME = new Set(["57014", "55P03"]);

/**
 * The read side of absent readers (docs/feed.md, "Absent readers"). Before a page, `returnReader`
 * reads the reader's row: nothing to do for a present reader (a write at most once per
 * readMarkEveryMs, to move last_read_at); for a reader fan-out skipped, it installs the inbox
 * from the facts in one transaction bounded by `rebuildMs` (lock_timeout and statement_timeout),
 * under the hot set's lock shared (as the rebuild) and the reader's row lock, the lock every consumer batch takes before writing that inbox.
 * Past the bound nothing is committed, the reader stays skipped and the answer says the page
 * is incomplete. Hook points: feed.return.beforeLock {reader, pid} once the bound is set,
 * feed.return.beforeCommit {reader, pid} after the install.
 */
export class FeedAbsence {
  private readonly hooks: Hooks;
  readonly absentMs: number;
  readonly rebuildMs: number;
  readonly maxItems: number;
  private readonly shareHotSet: HotSetShare;

  constructor(
    private readonly pool: Pool,
    /** hotSet replaces shareHotSet: for negative controls only. */
    options: { hooks?: Hooks; absentMs?: number; rebuildMs?: number; maxItems?: number; hotSet?: HotSetShare } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.shareHotSet = options.hotSet ?? shareHotSet;
    this.absentMs = options.absentMs ?? DEFAULT_FEED_ABSENT_MS;
    this.rebuildMs = options.rebuildMs ?? DEFAULT_FEED_RETURN_REBUILD_MS;
    this.maxItems = options.maxItems ?? DEFAULT_FEED_MAX_ITEMS;
  }

  async returnReader(reader: string): Promise<ReaderReturn> {
    validateId("reader", reader);
    const markEvery = readMarkEveryMs(this.absentMs);
    const { rows } = await this.pool.query<{ skipped: boolean; due: boolean }>(READ_STATE_SQL, [reader, markEvery]);
    // No row: nothing was ever written to this inbox, so nothing was skipped.
    if (rows.length === 0) return { complete: true, rebuilt: false };
    let skipped = rows[0]!.skipped;
    if (!skipped && rows[0]!.due) {
      // Waits for a consumer batch holding the row; RETURNING reads the row that batch left.
      const marked = await this.pool.query<{ skipped: boolean }>(MARK_READ_SQL, [reader, markEvery]);
      skipped = marked.rows[0]?.skipped ?? false;
    }
    if (!skipped) return { complete: true, rebuilt: false };
    try {
      const rebuilt = await this.rebuild(reader);
      return { complete: true, rebuilt };
    } catch (err) {
      if (err instanceof DatabaseError && OUT_OF_TIME.has(err.sqlState ?? ""))
        return { complete: false, retryAfterMs: this.rebuildMs };
      throw err;
    }
  }

  private async rebuild(reader: string): Promise<boolean> {
    return withTransaction(this.pool, async (client) => {
      await client.query(BOUND_SQL, [String(Math.trunc(this.rebuildMs))]);
      await this.hooks.at("feed.return.beforeLock", { reader, pid: backendPid(client) });
      // As the rebuild: ordered with every change of the hot set, which a returning reader's truth reads.
      await this.shareHotSet(client);
      await client.query(LOCK_READERS_SQL, [[reader]]);
      const { rows } = await client.query<{ rebuilt: boolean }>("SELECT rebuilt FROM feed_return_reader($1, $2)", [
        reader,
        this.maxItems,
      ]);
      await this.hooks.at("feed.return.beforeCommit", { reader, pid: backendPid(client) });
      return rows[0]!.rebuilt;
    });
  }
}
