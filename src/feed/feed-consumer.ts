import {
  addTally,
  drainBatches,
  applyEachBatch,
  inPartitionBatch,
  partitionOfBatch,
  pollPartitions,
} from "../counters/partition-batch.ts";
import { fetchPendingSql } from "../counters/watermark.ts";
import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { DEFAULT_FEED_ABSENT_MS, withoutAbsentReaders } from "./feed-absence.ts";
import {
  APPLY_PLAN_SQL,
  CREATE_READERS_SQL,
  FEED_SOURCES,
  LOCK_AUTHORS_SQL,
  LOCK_READERS_SQL,
  TRIM_SQL,
  type FeedSource,
} from "./feed-sources.ts";
import { DEFAULT_FEED_HOT_FOLLOWERS, judgeHotAuthors } from "./feed-hot.ts";

/** SQL hook point feed.consumer.afterFanOut {source, part, seqs, rows}: a batch's inbox rows are written, not committed. */
export const FAN_OUT_HOOK_SQL = "SELECT ledger_hook('feed.consumer.afterFanOut', $1::jsonb)";

/** The default of LEDGER_FEED_MAX_ITEMS: the most posts one inbox keeps. */
export const DEFAULT_FEED_MAX_ITEMS = 800;

/** A delivered outbox event: where it sits and the fingerprint of its row (feed-sources.ts). */
export interface FeedEvent {
  part: number;
  seq: number;
  fingerprint: string;
}

/** applied: a new event, reconciled; dup: delivered before (or pruned); rows: inbox rows added, removed or trimmed. */
export interface FeedStats {
  applied: number;
  dup: number;
  rows: number;
}

export function emptyFeedStats(): FeedStats {
  return { applied: 0, dup: 0, rows: 0 };
}

/** One row of a plan (FeedSource.planSql). */
export interface PlanRow {
  op: "add" | "remove";
  reader: string;
  post_id: string;
  author: string;
}

/**
 * Reads the plan of a batch's fresh events. Replaceable only so that a negative control can show
 * what breaks when the plan is not read from the facts after the author locks.
 */
export type FeedPlanner = (
  client: PoolClient,
  source: FeedSource,
  part: number,
  fresh: readonly number[],
  maxItems: number,
) => Promise<PlanRow[]>;

export const planFromFacts: FeedPlanner = async (client, source, part, fresh, maxItems) =>
  (
    await client.query<PlanRow>({
      name: `feed_${source.name}_plan`,
      text: source.planSql,
      values: source.capped ? [part, fresh, maxItems] : [part, fresh],
    })
  ).rows;

export interface FeedConsumerOptions {
  hooks?: Hooks;
  maxItems?: number;
  /** LEDGER_FEED_HOT_FOLLOWERS (docs/feed.md, "Hot authors"). */
  hotFollowers?: number;
  /** Replaces planFromFacts: for negative controls only. */
  plan?: FeedPlanner;
}

/**
 * Applies one outbox's events to the inboxes, in the frame every view runs in (inPartitionBatch:
 * lock the watermark row, body, advance the contiguous watermark). The body checks the batch
 * against the outbox, registers the new events in the seen table (the rest are dups and do
 * nothing), locks the events' authors, judges the post events' authors hot or not (feed-hot.ts),
 * reads the plan from the facts as they are now, locks the plan's readers in order, and applies it
 * (remove, add above the horizon except to absent readers, trim to the cap). An event is never
 * applied as it was written but as the facts are when it is applied, so a redelivered, reordered
 * or late event reconciles to the same inboxes (docs/feed.md). Hook
 * points: feed.consumer.afterLock {source, part, seqs, pid} once the authors are locked,
 * feed.consumer.beforeCommit {source, part, seqs, pid}; in SQL, feed.consumer.afterFanOut.
 */
export class FeedConsumer {
  private readonly hooks: Hooks;
  private readonly plan: FeedPlanner;
  readonly maxItems: number;
  /** LEDGER_FEED_HOT_FOLLOWERS: judged by the post consumer only. */
  readonly hotFollowers: number;
  /** LEDGER_FEED_ABSENT_MS: readers who have not read for this long get no rows (docs/feed.md, "Absent readers"). */
  readonly absentMs: number;
  private readonly sql: { fetchPending: string; fetchRange: string; fetchSeqs: string; markSeen: string };

  constructor(
    private readonly pool: Pool,
    readonly source: FeedSource,
    options: FeedConsumerOptions = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.plan = options.plan ?? planFromFacts;
    this.maxItems = options.maxItems ?? DEFAULT_FEED_MAX_ITEMS;
    this.hotFollowers = options.hotFollowers ?? DEFAULT_FEED_HOT_FOLLOWERS;
    this.absentMs = options.absentMs ?? DEFAULT_FEED_ABSENT_MS;
    const s = source;
    const columns = `o.part, o.seq, ${s.fingerprintSql} AS fingerprint`;
    this.sql = {
      fetchPending: fetchPendingSql(s.outbox, columns, s.tables),
      fetchRange: `SELECT ${columns} FROM ${s.outbox} o WHERE o.part = $1 AND o.seq BETWEEN $2 AND $3 ORDER BY o.seq`,
      fetchSeqs: `SELECT f.floor, ${columns}
                    FROM (SELECT coalesce((SELECT pruned_upto FROM retention_floor WHERE kind = $3 AND part = $1), 0) AS floor) f
                    LEFT JOIN ${s.outbox} o ON o.part = $1 AND o.seq = ANY ($2::bigint[])`,
      markSeen: `INSERT INTO ${s.tables.seen} (part, seq)
                 SELECT DISTINCT $1::int, s FROM unnest($2::bigint[]) AS s
                  WHERE s > (SELECT applied_upto FROM ${s.tables.watermark} WHERE part = $1) ORDER BY 2
                 ON CONFLICT DO NOTHING
                 RETURNING seq`,
    };
  }

  /** Applies a batch of one partition's delivered events, each checked against the outbox first. */
  async applyBatch(events: readonly FeedEvent[]): Promise<FeedStats & { watermark: number; expired: number }> {
    return this.applyEvents(events, true);
  }

  /**
   * Applies a batch that fetchPending read from the outbox itself: its rows never change (a prune
   * deletes only rows at or below the watermark, duplicates to the apply), so they are not
   * checked against it again. Everything else, hook points included, is applyBatch's path.
   */
  async applyFetched(events: readonly FeedEvent[]): Promise<FeedStats & { watermark: number; expired: number }> {
    return this.applyEvents(events, false);
  }
  /**
   * A round (a batch per partition) applied batch by batch, each in a transaction of its own: a reader's inbox rows
   * come from events of any partition, and the batch locks authors before readers, so
   * one transaction over several partitions would lock them partition by partition and two could wait
   * for each other (docs/write-path.md, "The consumers' round").
   */
  async applyRound(batches: readonly (readonly FeedEvent[])[]): Promise<FeedStats> {
    return applyEachBatch(batches, emptyFeedStats, (events) => this.applyFetched(events));
  }

  private async applyEvents(
    events: readonly FeedEvent[],
    delivered: boolean,
  ): Promise<FeedStats & { watermark: number; expired: number }> {
    const part = partitionOfBatch(events);
    const seqs = events.map((e) => e.seq);
    const source = this.source.name;
    return inPartitionBatch(
      this.pool,
      this.source.tables,
      part,
      async (client) => {
        const kept = delivered ? await this.requireOutboxMatch(client, part, events) : seqs;
        const expired = events.length - kept.length;
        const marked = await client.query<{ seq: number }>({
          name: `feed_${source}_mark_seen`,
          text: this.sql.markSeen,
          values: [part, kept],
        });
        const fresh = marked.rows.map((r) => r.seq);
        const { rows: authors } = await client.query<{ author: string }>({
          name: `feed_${source}_authors`,
          text: this.source.authorsSql,
          values: [part, fresh],
        });
        await client.query({
          name: "feed_lock_authors",
          text: LOCK_AUTHORS_SQL,
          values: [authors.map((a) => a.author)],
        });
        await this.hooks.at("feed.consumer.afterLock", { source, part, seqs, pid: backendPid(client) });
        // Only a post event changes an author's hot state, under its lock, before the plan is read.
        const transition =
          this.source.name === "posts"
            ? await judgeHotAuthors(
                client,
                authors.map((a) => a.author),
                this.hotFollowers,
                this.maxItems,
              )
            : [];
        const rows = fresh.length > 0 ? await this.applyPlan(client, part, fresh, transition) : 0;
        return { applied: fresh.length, dup: events.length - fresh.length, rows, expired };
      },
      (pid) => this.hooks.at("feed.consumer.beforeCommit", { source, part, seqs, pid }),
    );
  }

  private async applyPlan(
    client: PoolClient,
    part: number,
    fresh: readonly number[],
    transition: readonly PlanRow[],
  ): Promise<number> {
    const plan = [...transition, ...(await this.plan(client, this.source, part, fresh, this.maxItems))];
    if (plan.length === 0) return 0;
    const rows = await applyPlanRows(client, plan, this.maxItems, this.absentMs);
    // The SQL hook point (ledger_hook: a no-op unless a test database armed it) parks the batch with its
    // inbox rows written and uncommitted; a test parks a `worker` process there and kills it.
    await client.query(FAN_OUT_HOOK_SQL, [JSON.stringify({ source: this.source.name, part, seqs: fresh, rows })]);
    return rows;
  }

  /** Up to `limit` unprocessed events of a partition above its watermark and above `after` (no locks: the seen table absorbs overlaps). */
  async fetchPending(part: number, limit: number, after = 0): Promise<FeedEvent[]> {
    const { rows } = await this.pool.query<FeedEvent>({
      name: `feed_${this.source.name}_fetch_pending`,
      text: this.sql.fetchPending,
      values: [part, limit, after],
    });
    return rows;
  }

  /** Events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<FeedEvent[]> {
    return (await this.pool.query<FeedEvent>(this.sql.fetchRange, [part, fromSeq, toSeq])).rows;
  }

  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<FeedStats> {
    return pollPartitions(this, emptyFeedStats, parts, batchSize, signal);
  }

  async drain(batchSize = 200): Promise<FeedStats> {
    return drainBatches(this.pool, this.source.tables, `feed(${this.source.name})`, this, emptyFeedStats, batchSize);
  }

  /** The delivered events must be the outbox's; returns the seqs above the retention floor. */
  private async requireOutboxMatch(client: PoolClient, part: number, events: readonly FeedEvent[]): Promise<number[]> {
    const { rows } = await client.query<FeedEvent & { floor: number }>(this.sql.fetchSeqs, [
      part,
      events.map((e) => e.seq),
      this.source.name,
    ]);
    const floor = rows[0]!.floor;
    const stored = new Map(rows.filter((r) => r.seq !== null).map((r) => [r.seq, r.fingerprint]));
    const kept: number[] = [];
    for (const e of events) {
      if (e.seq <= floor) continue;
      const fingerprint = stored.get(e.seq);
      if (fingerprint === undefined || fingerprint !== e.fingerprint) {
        throw new InvalidInputError(
          "events",
          `event ${this.source.name} ${part}:${e.seq} ${fingerprint === undefined ? "is not in" : "does not match"} the outbox`,
        );
      }
      kept.push(e.seq);
    }
    return kept;
  }
}

/**
 * Creates and locks the plan's readers (in order), drops the 'add' rows of absent readers (read
 * after the locks: withoutAbsentReaders), applies the rest and trims the readers that grew;
 * returns the rows changed. The consumers write inboxes only through this.
 */
export async function applyPlanRows(
  client: PoolClient,
  fullPlan: readonly PlanRow[],
  maxItems: number,
  absentMs: number,
): Promise<number> {
  const readers = [...new Set(fullPlan.map((r) => r.reader))];
  await client.query(CREATE_READERS_SQL, [readers]);
  await client.query(LOCK_READERS_SQL, [readers]);
  const plan = await withoutAbsentReaders(client, fullPlan, absentMs);
  if (plan.length === 0) return 0;
  const { rows } = await client.query<{ removed: number; added: number; grown: string[] }>(APPLY_PLAN_SQL, [
    plan.map((r) => r.op),
    plan.map((r) => r.reader),
    plan.map((r) => r.post_id),
    plan.map((r) => r.author),
  ]);
  const { removed, added, grown } = rows[0]!;
  const trimmed =
    grown.length === 0 ? 0 : (await client.query<{ trimmed: number }>(TRIM_SQL, [grown, maxItems])).rows[0]!.trimmed;
  return removed + added + trimmed;
}

export interface FeedConsumerOptions {
  hooks?: Hooks;
  maxItems?: number;
  absentMs?: number;
  /** Replaces planFromFacts: for negative controls only. */
  plan?: FeedPlanner;
}

/** The two consumers of the home timeline (posts, relations), polled and drained together. */
export class FeedConsumers {
  readonly consumers: FeedConsumer[];

  constructor(pool: Pool, options: FeedConsumerOptions = {}) {
    this.consumers = FEED_SOURCES.map((s) => new FeedConsumer(pool, s, options));
  }

  consumer(name: FeedSource["name"]): FeedConsumer {
    return this.consumers.find((c) => c.source.name === name)!;
  }

  get maxItems(): number {
    return this.consumers[0]!.maxItems;
  }

  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<FeedStats> {
    const total = emptyFeedStats();
    for (const c of this.consumers) addTally(total, await c.pollOnce(parts, batchSize, signal));
    return total;
  }

  async drain(batchSize = 200): Promise<FeedStats> {
    const total = emptyFeedStats();
    for (const c of this.consumers) addTally(total, await c.drain(batchSize));
    return total;
  }
}
