import type { Pool } from "../db/pool.ts";
import { ForeignKeyViolationError } from "../db/errors.ts";
import { withStatementRetry } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { validateId } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import type { LikeResult } from "./types.ts";

export const ITEM_NOT_FOUND = "ITEM_NOT_FOUND";

/** What the server-side write function returns (migration 003, like_set). */
interface LikeSetRow {
  outcome: "CHANGED" | "NOOP" | "HIDDEN";
  liked: boolean;
  version: number;
  seq: number;
}

const LIKE_SET = { name: "like_set", text: "SELECT outcome, liked, version, seq FROM like_set($1, $2, $3, $4)" };
/** like_set after item_state in the truth (migration 015): 'HIDDEN' and nothing written when the user may not (un)like it. */
const LIKE_SET_IF_VISIBLE = { name: "like_set_if_visible", text: "SELECT outcome, liked, version, seq FROM like_set_if_visible($1, $2, $3, $4)" };

/**
 * The write path of chapter 32: placeholder row, lock the fact, compare with the target state,
 * and only on a change bump the version, take the next number of the user's partition sequence
 * and write the outbox event. All of it is the server-side function like_set (migrations 003,
 * 008, 016), called as one autocommit statement: one round trip per write. Its hook point
 * like.beforeCommit (ledger_hook, migration 016) is inside the function, after the outbox
 * insert with every lock held, so a race test parks this very call (docs/testing.md).
 * Lock order is fact row -> like_seq row of one partition, so writers of different partitions
 * never queue behind one another.
 */
export class LikeService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
  ) {}

  static async open(pool: Pool): Promise<LikeService> {
    return new LikeService(pool, await readPartitions(pool));
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
      name: "like_has_liked", text: "SELECT liked, version FROM like_fact WHERE user_id = $1 AND item_id = $2", values: [userId, itemId],
    });
    return rows[0] ?? { liked: false, version: 0 };
  }

  /**
   * The API's like and unlike: the same write as like/unlike, but only if the user may see the
   * item (item_state, migration 015, decided in the truth inside the same statement); an
   * unlike of one's own like is allowed also when a block hid the item. An item the user may
   * not (un)like is REJECTED ITEM_NOT_FOUND exactly like a missing one, and nothing is written.
   */
  setLikedIfVisible(userId: string, itemId: string, want: boolean): Promise<LikeResult> {
    return this.setLiked(userId, itemId, want, LIKE_SET_IF_VISIBLE);
  }

  private async setLiked(userId: string, itemId: string, want: boolean, statement: { name: string; text: string } = LIKE_SET): Promise<LikeResult> {
    validateId("userId", userId);
    validateId("itemId", itemId);
    const part = this.partitionOf(userId);
    const values = [userId, itemId, want, part];
    let row: LikeSetRow;
    try {
      row = await withStatementRetry(async () => (await this.pool.query<LikeSetRow>({ ...statement, values })).rows[0]!);
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

/** A missing item, and one the user may not see: the same answer, so it tells nothing. */
function notFound(part: number): LikeResult {
  return { outcome: "REJECTED", liked: false, version: 0, seq: 0, part, reason: "item does not exist", code: ITEM_NOT_FOUND };
}
