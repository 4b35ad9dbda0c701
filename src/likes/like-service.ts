import type { Pool } from "../db/pool.ts";
import { numericDefault } from "../config.ts";
import { AccountBeingErasedError, AccountErasedError, ForeignKeyViolationError } from "../db/errors.ts";
import { GroupCommit } from "../db/group-commit.ts";
import { withStatementRetry } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { validateId } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import type { LikeResult } from "./types.ts";

export const ITEM_NOT_FOUND = "ITEM_NOT_FOUND";

/** What the server-side write function like_set returns (src/db/schema.sql). */
interface LikeSetRow {
  outcome: "CHANGED" | "NOOP" | "HIDDEN";
  liked: boolean;
  version: number;
  seq: number;
}

const LIKE_SET = { name: "like_set", text: "SELECT outcome, liked, version, seq FROM like_set($1, $2, $3, $4)" };
/** like_set after item_state in the truth (like_set_if_visible): 'HIDDEN' and nothing written when the user may not (un)like it. */
const LIKE_SET_IF_VISIBLE = {
  name: "like_set_if_visible",
  text: "SELECT outcome, liked, version, seq FROM like_set_if_visible($1, $2, $3, $4)",
};

/** One answer of like_set_batch (src/db/schema.sql), ord being the write's position in the batch. */
interface LikeBatchRow {
  ord: number;
  outcome: "CHANGED" | "NOOP" | "REJECTED";
  liked: boolean;
  version: number;
  seq: number;
  code: string | null;
  /** With ACCOUNT_BEING_ERASED or ACCOUNT_ERASED: the account that refused the write. */
  account: string | null;
}

interface LikeWrite {
  userId: string;
  itemId: string;
  want: boolean;
  part: number;
  /** like_set_if_visible's rule (the API's write) instead of like_set's. */
  checked: boolean;
}

const LIKE_SET_BATCH = {
  name: "like_set_batch",
  text: "SELECT ord, outcome, liked, version, seq, code, account FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[])",
};

/**
 * Batches in flight at once per partition: one committing while the next takes its fact locks
 * and queues for the sequence row. A third could only queue behind the same row lock.
 */
export const LIKE_BATCHES_IN_FLIGHT = 2;

export interface LikeServiceOptions {
  /** Most writes per batch (LEDGER_WRITE_BATCH_MAX); 1: each write is its own like_set call, as before group commit. */
  batchMax?: number;
  /** Batches in flight per lane; default LIKE_BATCHES_IN_FLIGHT for a lane of one partition, 1 for a lane of several. */
  batchesInFlight?: number;
  /**
   * Batchers (lanes): partition p's writes go to lane p mod lanes, a fixed disjoint set of
   * partitions. Default (and at most) one lane per partition. A lane of more than one
   * partition runs one batch at a time, so no two batches of this service share a like_seq row.
   */
  lanes?: number;
}

/**
 * The write path of chapter 32: placeholder row, lock the fact, compare with the target state,
 * and only on a change bump the version, take the next number of the user's partition sequence
 * and write the outbox event. All of it is the server-side function like_set (src/db/schema.sql),
 * called as one autocommit statement: one round trip per write. Its hook point
 * like.beforeCommit (ledger_hook) is inside the function, after the outbox
 * insert with every lock held, so a race test parks this very call (docs/testing.md).
 * Lock order is fact row -> like_seq row of one partition, so writers of different partitions
 * never queue behind one another.
 *
 * Group commit (docs/write-path.md "Group commit"): writes of one partition that
 * arrive while LIKE_BATCHES_IN_FLIGHT batches of it are running go together as one
 * like_set_batch call, which decides each of them on its own, in arrival order,
 * and answers each with its own row; one commit per batch. A write to an idle partition goes at once.
 * The `lanes` option (LEDGER_WRITE_LANES, opt-in: docs/write-path.md "Lanes") shares one
 * batcher among several partitions, one batch in flight, to form larger batches when P is large.
 */
export class LikeService {
  /** One batcher per lane (partition p's is batchers[p mod lanes]); empty: LEDGER_WRITE_BATCH_MAX = 1, one like_set call per write. */
  private readonly batchers: GroupCommit<LikeWrite, LikeBatchRow>[] = [];

  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    options: LikeServiceOptions,
  ) {
    const batchMax = options.batchMax ?? numericDefault("LEDGER_WRITE_BATCH_MAX");
    const lanes = Math.min(partitions, options.lanes ?? partitions);
    if (!Number.isSafeInteger(lanes) || lanes < 1) throw new RangeError("lanes must be a positive integer");
    if (batchMax > 1) {
      for (let lane = 0; lane < lanes; lane++) {
        // A lane's batches may touch any of its partitions' sequence rows: two in flight could only queue on them.
        const shared = Math.ceil((partitions - lane) / lanes) > 1;
        this.batchers.push(
          new GroupCommit((writes) => this.runBatch(writes), {
            maxBatch: batchMax,
            maxInFlight: options.batchesInFlight ?? (shared ? 1 : LIKE_BATCHES_IN_FLIGHT),
          }),
        );
      }
    }
  }

  /** Group commit's figures so far, over every partition; undefined when unbatched. */
  batchStats(): { batches: number; writes: number; largest: number } | undefined {
    if (this.batchers.length === 0) return undefined;
    const all = this.batchers.map((b) => b.stats);
    return {
      batches: all.reduce((n, s) => n + s.batches, 0),
      writes: all.reduce((n, s) => n + s.writes, 0),
      largest: Math.max(...all.map((s) => s.largest)),
    };
  }

  static async open(pool: Pool, options: LikeServiceOptions = {}): Promise<LikeService> {
    return new LikeService(pool, await readPartitions(pool), options);
  }

  partitionOf(userId: string): number {
    return stablePartition(userId, this.partitions);
  }

  /** Makes an item likeable; idempotent. */
  async createItem(itemId: string): Promise<void> {
    validateId("itemId", itemId);
    await this.pool.query("INSERT INTO item (item_id, kind) VALUES ($1, 'plain') ON CONFLICT DO NOTHING", [itemId]);
  }

  like(userId: string, itemId: string): Promise<LikeResult> {
    return this.setLiked(userId, itemId, true);
  }

  unlike(userId: string, itemId: string): Promise<LikeResult> {
    return this.setLiked(userId, itemId, false);
  }

  /** Read-your-writes: straight from the fact row, never from the derived count. */
  async hasLiked(userId: string, itemId: string): Promise<{ liked: boolean; version: number }> {
    validateId("userId", userId);
    validateId("itemId", itemId);
    const { rows } = await this.pool.query<{ liked: boolean; version: number }>({
      name: "like_has_liked",
      text: "SELECT liked, version FROM like_fact WHERE user_id = $1 AND item_id = $2",
      values: [userId, itemId],
    });
    return rows[0] ?? { liked: false, version: 0 };
  }

  /**
   * The API's like and unlike: the same write as like/unlike, but only if the user may see the
   * item (item_state, decided in the truth inside the same statement); an
   * unlike of one's own like is allowed also when a block hid the item. An item the user may
   * not (un)like is REJECTED ITEM_NOT_FOUND exactly like a missing one, and nothing is written.
   */
  setLikedIfVisible(userId: string, itemId: string, want: boolean): Promise<LikeResult> {
    return this.setLiked(userId, itemId, want, LIKE_SET_IF_VISIBLE);
  }

  private async setLiked(
    userId: string,
    itemId: string,
    want: boolean,
    statement: { name: string; text: string } = LIKE_SET,
  ): Promise<LikeResult> {
    validateId("userId", userId);
    validateId("itemId", itemId);
    const part = this.partitionOf(userId);
    const batcher = this.batchers[part % Math.max(1, this.batchers.length)];
    if (!batcher) return this.setLikedAlone(userId, itemId, want, part, statement);
    return batchResult(
      await batcher.submit({ userId, itemId, want, part, checked: statement === LIKE_SET_IF_VISIBLE }),
      want,
      part,
    );
  }

  /**
   * One batch, one autocommit statement; re-run whole on a serialization failure or deadlock (it
   * wrote nothing). A batch of one is today's like_set call, which costs less than the loop's
   * bookkeeping; an exception there fails only its own write.
   */
  private async runBatch(writes: readonly LikeWrite[]): Promise<LikeBatchRow[]> {
    if (writes.length === 1) {
      const w = writes[0]!;
      const r = await this.setLikedAlone(
        w.userId,
        w.itemId,
        w.want,
        w.part,
        w.checked ? LIKE_SET_IF_VISIBLE : LIKE_SET,
      );
      return [
        {
          ord: 1,
          outcome: r.outcome,
          liked: r.liked,
          version: r.version,
          seq: r.seq,
          code: r.code ?? null,
          account: null,
        },
      ];
    }
    const values = [
      writes.map((w) => w.userId),
      writes.map((w) => w.itemId),
      writes.map((w) => w.want),
      writes.map((w) => w.part),
      writes.map((w) => w.checked),
    ];
    const rows = await withStatementRetry(
      async () => (await this.pool.query<LikeBatchRow>({ ...LIKE_SET_BATCH, values })).rows,
    );
    const byOrd: LikeBatchRow[] = [];
    for (const row of rows) byOrd[row.ord - 1] = row;
    return writes.map((_, i) => {
      const row = byOrd[i];
      if (!row) throw new Error(`like_set_batch returned no answer for write ${i + 1} of ${writes.length}`);
      return row;
    });
  }

  private async setLikedAlone(
    userId: string,
    itemId: string,
    want: boolean,
    part: number,
    statement: { name: string; text: string },
  ): Promise<LikeResult> {
    const values = [userId, itemId, want, part];
    let row: LikeSetRow;
    try {
      row = await withStatementRetry(
        async () => (await this.pool.query<LikeSetRow>({ ...statement, values })).rows[0]!,
      );
    } catch (err) {
      if (err instanceof ForeignKeyViolationError && err.constraint === "like_fact_item_id_fkey") {
        // The placeholder insert is the function's first statement, so nothing was written.
        return notFound(part);
      }
      throw err;
    }
    if (row.outcome === "HIDDEN") return notFound(part);
    const reason = row.outcome === "NOOP" ? (want ? "already liked" : "not liked") : want ? "liked" : "unliked";
    return { outcome: row.outcome, liked: row.liked, version: row.version, seq: row.seq, part, reason };
  }
}

function batchResult(row: LikeBatchRow, want: boolean, part: number): LikeResult {
  if (row.outcome === "REJECTED") {
    if (row.code === "ACCOUNT_BEING_ERASED") {
      // The same typed error as the guard's SQLSTATE SLE01 on the one-write path (erasure_refuse).
      throw new AccountBeingErasedError(
        "ACCOUNT_BEING_ERASED",
        `account ${row.account ?? "?"} is being erased: writes by or towards it are refused until the erasure completes`,
        undefined,
        "SLE01",
      );
    }
    // The guard's SQLSTATE SLE02 on the one-write path: a like by an erased account (erasure_guard_like).
    if (row.code === "ACCOUNT_ERASED") throw AccountErasedError.of(row.account ?? "?");
    return notFound(part);
  }
  const reason = row.outcome === "NOOP" ? (want ? "already liked" : "not liked") : want ? "liked" : "unliked";
  return { outcome: row.outcome, liked: row.liked, version: row.version, seq: row.seq, part, reason };
}

/** A missing item, and one the user may not see: the same answer, so it tells nothing. */
function notFound(part: number): LikeResult {
  return {
    outcome: "REJECTED",
    liked: false,
    version: 0,
    seq: 0,
    part,
    reason: "item does not exist",
    code: ITEM_NOT_FOUND,
  };
}
