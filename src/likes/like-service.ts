import type { Pool } from "../db/pool.ts";
import { numericDefault } from "../config.ts";
import { AccountBeingErasedError, AccountErasedError } from "../db/errors.ts";
import { GroupCommit } from "../db/group-commit.ts";
import { withStatementRetry } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { validateId } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import type { LikeResult } from "./types.ts";

export const ITEM_NOT_FOUND = "ITEM_NOT_FOUND";

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
  /** The API's write: item_state's visibility rule, instead of the library's (any existing item). */
  checked: boolean;
}

const LIKE_SET_BATCH = {
  name: "like_set_batch",
  text: "SELECT ord, outcome, liked, version, seq, code, account FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[])",
};

/**
 * Batches in flight at once: one committing while the next takes its fact locks and queues for
 * the sequence rows it shares with the first. A third could only queue behind the same row locks.
 */
export const LIKE_BATCHES_IN_FLIGHT = 2;

export interface LikeServiceOptions {
  /** Most writes per batch (LEDGER_WRITE_BATCH_MAX); 1: each write is a batch of one. */
  batchMax?: number;
  /** Batches in flight at once; default LIKE_BATCHES_IN_FLIGHT. */
  batchesInFlight?: number;
}

/**
 * The write path of chapter 32: lock the fact, compare with the target state, and only on a
 * change bump the version, take the next number of the user's partition sequence and write the
 * outbox event. All of it is the server-side function like_set_batch (src/db/schema.sql), one
 * autocommit statement per batch. Its hook point like.beforeCommit (ledger_hook) is inside the
 * function, after the outbox insert with every lock held, so a race test parks this very call
 * (docs/testing.md).
 *
 * One write path (docs/write-path.md, "One write path"): every like and unlike of this process
 * goes through one batcher, whatever its partition. Writes that arrive while
 * LIKE_BATCHES_IN_FLIGHT batches are running go together as one like_set_batch call, which
 * decides each on its own, in arrival order, takes the sequence rows of its partitions in
 * ascending order, and answers each with its own row; one commit per batch. A write that finds
 * the service idle goes at once, as a batch of one, through the same function.
 */
export class LikeService {
  private readonly batcher: GroupCommit<LikeWrite, LikeBatchRow>;

  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    options: LikeServiceOptions,
  ) {
    const maxBatch = options.batchMax ?? numericDefault("LEDGER_WRITE_BATCH_MAX");
    this.batcher = new GroupCommit((writes) => this.runBatch(writes), {
      maxBatch,
      // Unbatched (LEDGER_WRITE_BATCH_MAX = 1): every caller's write is sent at once, as before group commit.
      maxInFlight: options.batchesInFlight ?? (maxBatch === 1 ? Number.MAX_SAFE_INTEGER : LIKE_BATCHES_IN_FLIGHT),
    });
  }

  /** Group commit's figures so far. */
  batchStats(): { batches: number; writes: number; largest: number } {
    return { ...this.batcher.stats };
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
    return this.setLiked(userId, itemId, want, true);
  }

  private async setLiked(userId: string, itemId: string, want: boolean, checked = false): Promise<LikeResult> {
    validateId("userId", userId);
    validateId("itemId", itemId);
    const part = this.partitionOf(userId);
    return batchResult(await this.batcher.submit({ userId, itemId, want, part, checked }), want, part);
  }

  /**
   * One batch, one autocommit statement; re-run whole on a serialization failure or deadlock (it
   * wrote nothing). Each write's answer is the row of its own ord.
   */
  private async runBatch(writes: readonly LikeWrite[]): Promise<LikeBatchRow[]> {
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
}

/**
 * The typed error of a like the erasure guard or a tombstone refused (REJECTED ACCOUNT_BEING_ERASED
 * or ACCOUNT_ERASED, with the account): the same errors as the guard's SQLSTATE SLE01 and SLE02
 * (erasure_refuse, erasure_erased_refuse); undefined for any other answer.
 */
export function likeRefusalError(row: { code: string | null; account: string | null }): Error | undefined {
  if (row.code === "ACCOUNT_BEING_ERASED") {
    return new AccountBeingErasedError(
      "ACCOUNT_BEING_ERASED",
      `account ${row.account ?? "?"} is being erased: writes by or towards it are refused until the erasure completes`,
      undefined,
      "SLE01",
    );
  }
  if (row.code === "ACCOUNT_ERASED") return AccountErasedError.of(row.account ?? "?");
  return undefined;
}

function batchResult(row: LikeBatchRow, want: boolean, part: number): LikeResult {
  if (row.outcome === "REJECTED") {
    const refused = likeRefusalError(row);
    if (refused) throw refused;
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
