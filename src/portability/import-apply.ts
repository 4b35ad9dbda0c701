import type { Pool, PoolClient } from "../db/pool.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { withTransaction } from "../db/transaction.ts";
import { LedgerError } from "../errors.ts";
import { REBUILD_LOCK_KEY } from "../likes/like-rebuild.ts";
import { likeRefusalError } from "../likes/like-service.ts";
import { stablePartition } from "../partition.ts";
import type { RelationService } from "../relations/relation-service.ts";
import { setHideCollections } from "../relations/account-settings.ts";
import { NOTIFICATION_REBUILD_LOCK_KEY, NotificationRebuild } from "../notifications/notification-rebuild.ts";
import { FeedRebuild } from "../feed/feed-rebuild.ts";
import * as sql from "./import-sql.ts";

export class ImportRunningError extends LedgerError {
  constructor() {
    super("IMPORT_RUNNING", "another import is applying; run this one when it has finished");
  }
}

/**
 * A batch commits without waiting for its WAL flush. Safe because the batch and its cursor are one
 * transaction: a server crash loses a suffix of commits whole (WAL is replayed in order), each lost
 * batch with its own cursor, so the resumed run redoes exactly those; and any later commit that read
 * a batch's rows (a live write waiting on its locks, the next batch) flushes the WAL up to its own
 * record, the batch's commit included, before it is acknowledged (docs/import.md, "Resumability").
 */
const ASYNC_COMMIT = "SET LOCAL synchronous_commit = off";

/** Advisory lock key of the apply: one import applies at a time ("importer" in ASCII). */
const IMPORT_LOCK_KEY = 0x696d706f72746572n.toString();

export type Phase =
  | "accounts"
  | "items"
  | "blocks"
  | "follows"
  | "likes"
  | "follow_writes"
  | "like_writes"
  | "notifications"
  | "caches"
  | "done";
const PHASES: readonly Phase[] = [
  "accounts",
  "items",
  "blocks",
  "follows",
  "likes",
  "follow_writes",
  "like_writes",
  "notifications",
  "caches",
  "done",
];

/** Recipients per notification rebuild of the notifications phase (one snapshot each). */
const NOTIFICATION_PAGE = 500;

/** The staged kind each line-walking phase reads. */
const KIND_OF: Partial<Record<Phase, string>> = {
  accounts: "account",
  items: "item",
  blocks: "block",
  follows: "follow",
  likes: "like",
  follow_writes: "follow",
  like_writes: "like",
};

/** What the apply wrote, per phase (rows written; a line already true in the database writes nothing). */
export type Applied = Record<string, number>;

export interface ApplyOptions {
  /** The most staged lines per batch transaction (default 20,000). */
  batchSize?: number;
  /**
   * The time a set-based batch should take (default 1,000 ms), which bounds how long it holds
   * its locks: the next batch's size is this batch's scaled by budget / time taken, between 100
   * lines and batchSize, starting at 1,000 lines.
   */
  batchMillis?: number;
  /** Called after every batch with the phase's lines applied so far and its lines in all (the staged lines of its kind). */
  onProgress?: (phase: Phase, linesDone: number, phaseLines: number) => void;
  /** LEDGER_FEED_MAX_ITEMS: the cap of the home timeline inboxes the notifications phase rebuilds (default 800). */
  feedMaxItems?: number;
  /** Drops the Redis counters of the run's targets (the count layer backfills them from the facts); absent: no Redis. */
  dropCounters?: (targets: readonly { kind: string; target: string }[]) => Promise<void>;
  /**
   * Called when a phase ends with `apply: <phase>`, the milliseconds it took in this run and, for a
   * phase that walks staged lines, how many it went through in this run (the report's breakdown).
   */
  onTiming?: (step: string, ms: number, lines?: number) => void;
}

interface RunState {
  phase: Phase;
  /** The last `ord` of the phase's kind applied. */
  afterOrd: number;
  importedAt: Date;
  likesLeft: number;
  applied: Applied;
}

/**
 * The second pass: applies a staged run phase by phase (accounts, items, blocks, follows, likes,
 * then the lines whose pairs have history through the live write functions, then the Redis
 * counters), each phase in batches of staged lines. A batch is one transaction that commits its
 * facts, their baselines and derived rows, and the run's cursor together, so after a kill the
 * same command goes on from the last committed batch, and a line applied twice writes nothing
 * the second time.
 */
export class ImportApply {
  constructor(
    private readonly pool: Pool,
    private readonly relations: RelationService,
    private readonly options: ApplyOptions = {},
  ) {}

  async apply(runId: number): Promise<Applied> {
    const lock = await this.pool.connect();
    try {
      const { rows } = await lock.query<{ ok: boolean }>("SELECT pg_try_advisory_lock($1) AS ok", [IMPORT_LOCK_KEY]);
      if (!rows[0]!.ok) throw new ImportRunningError();
      try {
        return await this.applyLocked(runId, lock);
      } finally {
        await lock.query("SELECT pg_advisory_unlock_all()");
      }
    } finally {
      lock.release();
    }
  }

  private async applyLocked(runId: number, lock: PoolClient): Promise<Applied> {
    const partitions = await readPartitions(this.pool);
    let state = await this.readState(runId);
    let holdsRebuildLock = false;
    let last: { phase: Phase; ord: number } | undefined;
    const maxSize = this.options.batchSize ?? 20_000;
    const budget = this.options.batchMillis ?? 1_000;
    let size = Math.min(1_000, maxSize);
    let phaseStarted = performance.now();
    let phaseLines = 0;
    while (state.phase !== "done") {
      const phase = state.phase;
      if ((phase === "likes" || phase === "follows") && !holdsRebuildLock) {
        // A rebuild installs its view from its snapshot plus the events after it; these facts have
        // no events, so none may run across the phase: a like rebuild across the likes (docs/import.md,
        // "Counts"), a notification rebuild across the follows, whose rows they write.
        await lock.query("SELECT pg_advisory_lock($1)", [
          phase === "likes" ? REBUILD_LOCK_KEY : NOTIFICATION_REBUILD_LOCK_KEY,
        ]);
        holdsRebuildLock = true;
      }
      if (phase !== "caches" && phase !== "notifications" && last?.phase !== phase)
        last = { phase, ord: await this.lastOrd(runId, KIND_OF[phase]!) };
      // Every like line was written set-based: the like_writes phase would only probe and find each liked.
      const nothingLeft = phase === "like_writes" && state.likesLeft === 0;
      const upto =
        phase === "caches"
          ? await this.dropCounters(runId)
          : phase === "notifications"
            ? await this.rebuildNotifications(runId)
            : nothingLeft || state.afterOrd >= last!.ord
              ? null
              : Math.min(state.afterOrd + size, last!.ord);
      if (upto === null) {
        if (phase === "accounts")
          await this.addApplied(
            runId,
            "actors",
            (await this.pool.query<{ written: number }>(sql.INSERT_ACTORS, [runId])).rows[0]!.written,
          );
        if (holdsRebuildLock) {
          await lock.query("SELECT pg_advisory_unlock($1)", [
            phase === "likes" ? REBUILD_LOCK_KEY : NOTIFICATION_REBUILD_LOCK_KEY,
          ]);
          holdsRebuildLock = false;
        }
        const next = PHASES[PHASES.indexOf(phase) + 1]!;
        await this.pool.query(
          "UPDATE import_run SET phase = $2, after_ord = 0, finished_at = CASE WHEN $2 = 'done' THEN now() END WHERE run_id = $1",
          [runId, next],
        );
        if (next === "done") await this.pool.query("DELETE FROM import_stage WHERE run_id = $1", [runId]);
        const now = performance.now();
        this.options.onTiming?.(`apply: ${phase}`, now - phaseStarted, KIND_OF[phase] ? phaseLines : undefined);
        phaseStarted = now;
        phaseLines = 0;
      } else {
        const started = performance.now();
        await this.applyBatch(phase, [runId, state.afterOrd, upto, KIND_OF[phase]!], state, partitions);
        const took = Math.max(1, performance.now() - started);
        phaseLines += upto - state.afterOrd;
        size = Math.max(
          Math.min(100, maxSize),
          Math.min(maxSize, Math.round(((upto - state.afterOrd) * budget) / took)),
        );
        this.options.onProgress?.(phase, upto, last!.ord);
      }
      state = await this.readState(runId);
    }
    return state.applied;
  }

  private async lastOrd(runId: number, kind: string): Promise<number> {
    const { rows } = await this.pool.query<{ last: string }>(sql.LAST_ORD, [runId, kind]);
    return Number(rows[0]!.last);
  }

  /**
   * The Redis counters of every target the run touched are dropped, so the count layer backfills
   * them from the facts at their next read: the imported facts have no events for its feeder or
   * its reconciliation to see. Idempotent; null: the phase is over.
   */
  private async dropCounters(runId: number): Promise<null> {
    if (!this.options.dropCounters) return null;
    const { rows } = await this.pool.query<{ kind: string; target: string }>(sql.TOUCHED_TARGETS, [runId]);
    if (rows.length > 0) await this.options.dropCounters(rows);
    await this.addApplied(runId, "caches", rows.length);
    return null;
  }

  /**
   * The notification view of every account the run's lines notify (followees, authors of liked
   * posts and comments) is rebuilt from the facts: the set-based phases wrote no events for its
   * consumer to see (docs/import.md, "Notifications"). Idempotent, so a resumed run repeats it
   * whole (its figure: the recipients whose view changed); null: the phase is over. A notification rebuild already running refuses it
   * (NOTIFICATION_REBUILD_IN_PROGRESS), and the same command resumes here.
   */
  private async rebuildNotifications(runId: number): Promise<null> {
    const { rows } = await this.pool.query<{ recipient: string }>(sql.NOTIFIED_RECIPIENTS, [runId]);
    const recipients = rows.map((r) => r.recipient);
    const rebuild = new NotificationRebuild(this.pool);
    let changed = 0;
    for (let i = 0; i < recipients.length; i += NOTIFICATION_PAGE) {
      changed += (await rebuild.rebuild({ recipients: recipients.slice(i, i + NOTIFICATION_PAGE) })).changed.length;
    }
    await this.addApplied(runId, "notifications", changed);
    // The home timelines of the run's followers, for the same reason (docs/feed.md): an imported
    // follow has no event for the feed consumer to merge. Idempotent as well.
    const { rows: readers } = await this.pool.query<{ reader: string }>(sql.FEED_READERS, [runId]);
    const feed = new FeedRebuild(this.pool, {
      ...(this.options.feedMaxItems === undefined ? {} : { maxItems: this.options.feedMaxItems }),
    });
    await feed.rebuild({ readers: readers.map((r) => r.reader) });
    return null;
  }

  /** One batch of a phase; the cursor and the counts are written in the batch's own transaction where it has one. */
  private async applyBatch(
    phase: Phase,
    range: [number, number, number, string],
    state: RunState,
    partitions: number,
  ): Promise<void> {
    const [runId, , upto] = range;
    const at = state.importedAt;
    const inBatch = (work: (client: PoolClient) => Promise<number>) =>
      withTransaction(this.pool, async (client) => {
        await client.query(ASYNC_COMMIT);
        const written = await work(client);
        await this.advance(client, runId, upto, phase, written);
      });
    switch (phase) {
      case "accounts": {
        // Existing accounts the file changes go through PUT /v1/accounts/{id}'s path first (each
        // its own transaction, a no-op when already done), then the new ones in the batch.
        const { rows: changed } = await this.pool.query<{ id: string; private: boolean | null; hide: boolean | null }>(
          sql.CHANGED_ACCOUNTS,
          range,
        );
        for (const c of changed) {
          if (c.private !== null) await this.relations.upsertAccount(c.id, { private: c.private });
          if (c.hide !== null) await setHideCollections(this.pool, c.id, c.hide);
        }
        await inBatch(
          async (client) =>
            changed.length + (await client.query<{ written: number }>(sql.INSERT_ACCOUNTS, range)).rows[0]!.written,
        );
        return;
      }
      case "items":
        await inBatch(
          async (client) => (await client.query<{ written: number }>(sql.INSERT_ITEMS, range)).rows[0]!.written,
        );
        return;
      case "blocks":
        await inBatch(async (client) => {
          const { rows: fresh } = await client.query<{ a: string; b: string }>(sql.NEW_BLOCKS, range);
          const { rows } = await client.query<{ written: number }>(sql.APPLY_BLOCKS, [...range, at, partitions]);
          if (fresh.length > 0)
            await client.query(sql.DATE_NEW_BLOCKS, [...range, at, fresh.map((f) => f.a), fresh.map((f) => f.b)]);
          await client.query("SET LOCAL ledger.tombstone_blocks = 'on'");
          const { rows: kept } = await client.query<{ written: number }>(sql.APPLY_TOMBSTONE_BLOCKS, [...range, at]);
          await client.query("SET LOCAL ledger.tombstone_blocks = ''");
          return rows[0]!.written + kept[0]!.written;
        });
        return;
      case "follows":
        await inBatch(async (client) => {
          for (const [i, text] of sql.LOCK_FOLLOW_PAIRS.entries())
            await client.query(text, i === 3 ? [...range, partitions] : range);
          return (await client.query<{ written: number }>(sql.APPLY_FOLLOWS, [...range, at])).rows[0]!.written;
        });
        return;
      case "likes":
        await inBatch(async (client) => {
          await client.query(sql.LOCK_LIKE_WATERMARKS, [...range, partitions]);
          const { written } = (await client.query<{ written: number }>(sql.APPLY_LIKES, [...range, partitions, at]))
            .rows[0]!;
          // ord is dense, so the batch holds upto - after lines.
          const left = upto - range[1] - written;
          if (left > 0)
            await client.query("UPDATE import_run SET likes_left = likes_left + $2 WHERE run_id = $1", [runId, left]);
          return written;
        });
        return;
      case "follow_writes": {
        // Pairs with history: relation_follow itself (an event each), and an ACTIVE line towards
        // a private account is the follow approved, as its owner would approve it.
        const { rows } = await this.pool.query<{ follower: string; followee: string; state: string }>(
          sql.UNSATISFIED_FOLLOWS,
          range,
        );
        let written = 0;
        for (const r of rows) {
          const result = await this.relations.follow(r.follower, r.followee);
          if (result.outcome === "CHANGED") written++;
          if (r.state === "ACTIVE" && result.state === "PENDING")
            await this.relations.decide(r.followee, r.follower, true);
        }
        await withTransaction(this.pool, async (client) => {
          await client.query(ASYNC_COMMIT);
          await this.advance(client, runId, upto, phase, written);
        });
        return;
      }
      case "like_writes": {
        // Likes of posts and comments, and pairs with history: like_set_if_visible itself.
        const { rows } = await this.pool.query<{ user_id: string; item_id: string }>(sql.UNSATISFIED_LIKES, range);
        let written = 0;
        let hidden = 0;
        for (const r of rows) {
          const { rows: out } = await this.pool.query<{ outcome: string; code: string | null; account: string | null }>(
            "SELECT outcome, code, account FROM like_set_if_visible($1, $2, true, $3)",
            [r.user_id, r.item_id, stablePartition(r.user_id, partitions)],
          );
          const refused = likeRefusalError(out[0]!);
          if (refused) throw refused;
          if (out[0]!.outcome === "CHANGED") written++;
          else if (out[0]!.outcome === "REJECTED") hidden++;
        }
        await withTransaction(this.pool, async (client) => {
          await this.advance(client, runId, upto, phase, written);
          if (hidden > 0) await addAppliedOn(client, runId, "hidden", hidden);
        });
        return;
      }
      case "notifications":
      case "caches":
      case "done":
        return;
    }
  }

  private async advance(client: PoolClient, runId: number, upto: number, phase: Phase, written: number): Promise<void> {
    await client.query(
      "UPDATE import_run SET after_ord = $2, applied = jsonb_set(applied, ARRAY[$3], to_jsonb(coalesce((applied ->> $3)::bigint, 0) + $4)) WHERE run_id = $1",
      [runId, upto, phase, written],
    );
  }

  private async addApplied(runId: number, key: string, n: number): Promise<void> {
    await withTransaction(this.pool, (client) => addAppliedOn(client, runId, key, n));
  }

  private async readState(runId: number): Promise<RunState> {
    const { rows } = await this.pool.query<{
      phase: Phase;
      after_ord: string;
      imported_at: Date;
      applied: Applied;
      likes_left: string;
    }>("SELECT phase, after_ord, imported_at, applied, likes_left FROM import_run WHERE run_id = $1", [runId]);
    const r = rows[0]!;
    return {
      phase: r.phase,
      afterOrd: Number(r.after_ord),
      importedAt: r.imported_at,
      applied: r.applied,
      likesLeft: Number(r.likes_left),
    };
  }
}

async function addAppliedOn(client: PoolClient, runId: number, key: string, n: number): Promise<void> {
  await client.query(
    "UPDATE import_run SET applied = jsonb_set(applied, ARRAY[$2], to_jsonb(coalesce((applied ->> $2)::bigint, 0) + $3)) WHERE run_id = $1",
    [runId, key, n],
  );
}
