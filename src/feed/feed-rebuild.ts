import type { Pool } from "../db/pool.ts";
import { backendPid } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";
import { DEFAULT_FEED_MAX_ITEMS } from "./feed-consumer.ts";
import { CREATE_READERS_SQL, LOCK_READERS_SQL, shareHotSet, type HotSetShare } from "./feed-sources.ts";

/** What a rebuild found: per reader whose inbox it changed, the rows added and removed; runId: its feed_rebuild_run row. */
export interface FeedRebuildReport {
  runId: number;
  readersChecked: number;
  readersDrifted: number;
  rowsAdded: number;
  rowsRemoved: number;
  changed: { reader: string; added: number; removed: number }[];
}

const RECORD_RUN_SQL = `INSERT INTO feed_rebuild_run (readers_checked, readers_drifted, rows_added, rows_removed)
                        VALUES ($1, $2, $3, $4) RETURNING run_id`;

const CLEAR_SKIPPED_SQL = "UPDATE feed_reader SET skipped_since = NULL WHERE reader = $1 AND skipped_since IS NOT NULL";

/** Every account that has, or should have, an inbox. */
const ALL_READERS_SQL = `
  SELECT reader FROM feed_reader
  UNION SELECT reader FROM feed_inbox
  UNION SELECT follower FROM relation WHERE state = 'ACTIVE'
  UNION SELECT author FROM post WHERE deleted_at IS NULL
  ORDER BY 1`;

/**
 * The home timelines from the facts, one reader per short transaction: take the hot set's lock
 * shared (a heating or cooling batch waits, and is waited for), lock the reader's row (as every
 * consumer batch does before it writes the reader's inbox), then install its truth (the SQL
 * function feed_install_reader). It never fights live fan-out: a batch that wrote the reader
 * before has committed, one after it reconciles with the facts again; an event still pending is
 * applied later and reads the same facts (docs/feed.md, "Rebuild"). Paced as the other
 * background jobs. Hook point: feed.rebuild.beforeCommit {reader, pid}.
 */
export class FeedRebuild {
  private readonly hooks: Hooks;
  private readonly pacer: Pacer;
  private readonly shareHotSet: HotSetShare;
  readonly maxItems: number;

  constructor(
    private readonly pool: Pool,
    /** hotSet replaces shareHotSet: for negative controls only. */
    options: { hooks?: Hooks; pacing?: PacingOptions; maxItems?: number; hotSet?: HotSetShare } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.shareHotSet = options.hotSet ?? shareHotSet;
    this.pacer = new Pacer(options.pacing ?? DEFAULT_PACING, 1);
    this.maxItems = options.maxItems ?? DEFAULT_FEED_MAX_ITEMS;
  }

  async rebuild(options: { readers?: readonly string[] } = {}): Promise<FeedRebuildReport> {
    if (options.readers !== undefined && !Array.isArray(options.readers))
      throw new InvalidInputError("readers", "must be an array of account ids when given");
    const readers =
      options.readers?.map((r) => validateId("readers", r)) ??
      (await this.pool.query<{ reader: string }>(ALL_READERS_SQL)).rows.map((r) => r.reader);
    const changed: FeedRebuildReport["changed"] = [];
    for (const reader of readers) {
      const t0 = performance.now();
      const r = await this.installReader(reader);
      if (r.added + r.removed > 0) changed.push({ reader, ...r });
      await rest(this.pacer.restMs(performance.now() - t0));
    }
    const rowsAdded = changed.reduce((n, c) => n + c.added, 0);
    const rowsRemoved = changed.reduce((n, c) => n + c.removed, 0);
    // Recorded as the counts' rebuilds record theirs: ledger_feed_rebuild_rows_total adds them up.
    const { rows } = await this.pool.query<{ run_id: number }>(RECORD_RUN_SQL, [
      readers.length,
      changed.length,
      rowsAdded,
      rowsRemoved,
    ]);
    return {
      runId: Number(rows[0]!.run_id),
      readersChecked: readers.length,
      readersDrifted: changed.length,
      rowsAdded,
      rowsRemoved,
      changed,
    };
  }

  async installReader(reader: string): Promise<{ added: number; removed: number }> {
    return withTransaction(this.pool, async (client) => {
      await this.shareHotSet(client);
      await client.query(CREATE_READERS_SQL, [[reader]]);
      await client.query(LOCK_READERS_SQL, [[reader]]);
      const { rows } = await client.query<{ added: number; removed: number }>(
        "SELECT added, removed FROM feed_install_reader($1, $2)",
        [reader, this.maxItems],
      );
      // The inbox is the truth now: complete, whether or not fan-out had skipped its reader.
      await client.query(CLEAR_SKIPPED_SQL, [reader]);
      await this.hooks.at("feed.rebuild.beforeCommit", { reader, pid: backendPid(client) });
      return rows[0]!;
    });
  }
}
