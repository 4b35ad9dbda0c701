import type { Pool, PoolClient } from "../db/pool.ts";
import { ForeignKeyViolationError } from "../db/errors.ts";
import { withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import type { LikeResult } from "./types.ts";

export const ITEM_NOT_FOUND = "ITEM_NOT_FOUND";

/**
 * The write path of chapter 32. One transaction per request: placeholder row, lock the
 * fact, compare with the target state, and only on a change bump the version, take the next
 * number of the user's partition sequence and write the outbox event. Lock order is
 * fact row -> like_seq row of one partition, so writers of different partitions never
 * queue behind one another.
 */
export class LikeService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    private readonly hooks: Hooks,
  ) {}

  static async open(pool: Pool, options: { hooks?: Hooks } = {}): Promise<LikeService> {
    return new LikeService(pool, await readPartitions(pool), options.hooks ?? new Hooks());
  }

  partitionOf(userId: string): number {
    return stablePartition(userId, this.partitions);
  }

  /** Makes an item likeable; idempotent. */
  async createItem(itemId: string): Promise<void> {
    validateId("itemId", itemId);
    await this.pool.query("INSERT INTO item (item_id) VALUES ($1) ON CONFLICT DO NOTHING", [itemId]);
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

  private async setLiked(userId: string, itemId: string, want: boolean): Promise<LikeResult> {
    validateId("userId", userId);
    validateId("itemId", itemId);
    const part = this.partitionOf(userId);
    try {
      return await withTransaction(this.pool, (client) => this.setLikedIn(client, userId, itemId, want, part));
    } catch (err) {
      if (err instanceof ForeignKeyViolationError && err.constraint === "like_fact_item_id_fkey") {
        // The placeholder insert is the first statement, so the aborted transaction wrote nothing.
        return { outcome: "REJECTED", liked: false, version: 0, seq: 0, part, reason: "item does not exist", code: ITEM_NOT_FOUND };
      }
      throw err;
    }
  }

  private async setLikedIn(client: PoolClient, userId: string, itemId: string, want: boolean, part: number): Promise<LikeResult> {
    await client.query(
      "INSERT INTO like_fact (user_id, item_id, liked, version) VALUES ($1, $2, false, 0) ON CONFLICT DO NOTHING",
      [userId, itemId],
    );
    const { rows } = await client.query<{ liked: boolean; version: number }>(
      "SELECT liked, version FROM like_fact WHERE user_id = $1 AND item_id = $2 FOR UPDATE",
      [userId, itemId],
    );
    const current = rows[0]!;
    if (current.liked === want) {
      return {
        outcome: "NOOP", liked: current.liked, version: current.version, seq: 0, part,
        reason: want ? "already liked" : "not liked",
      };
    }
    const version = current.version + 1;
    await client.query(
      "UPDATE like_fact SET liked = $3, version = $4, changed_at = now() WHERE user_id = $1 AND item_id = $2",
      [userId, itemId, want, version],
    );
    const seqRows = await client.query<{ last: number }>(
      "UPDATE like_seq SET last = last + 1 WHERE part = $1 RETURNING last",
      [part],
    );
    const seq = seqRows.rows[0]!.last;
    await client.query(
      "INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version) VALUES ($1, $2, $3, $4, $5, $6)",
      [part, seq, userId, itemId, want ? 1 : -1, version],
    );
    await this.hooks.at("like.beforeCommit", { userId, itemId, seq, part });
    return { outcome: "CHANGED", liked: want, version, seq, part, reason: want ? "liked" : "unliked" };
  }
}
