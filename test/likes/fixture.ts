import { Hooks } from "../../src/hooks.ts";
import { LikeConsumer, type ApplyBatch } from "../../src/likes/like-consumer.ts";
import { LikeRebuild } from "../../src/likes/like-rebuild.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

export interface LikesFixture {
  db: TestDatabase;
  hooks: Hooks;
  likes: LikeService;
  consumer: LikeConsumer;
  rebuild: LikeRebuild;
  consumerWith(applyBatch: ApplyBatch): LikeConsumer;
  close(): Promise<void>;
}

export const LAB_ITEMS = ["item-lab-01", "item-lab-02", "item-lab-03", "item-lab-04"];

export function user(n: number): string {
  return `user-${String(n).padStart(2, "0")}`;
}

/** A fresh database with P partitions, the lab items created, and the three components wired to one Hooks; `sqlHooks: false` as in production. */
export async function likesFixture(
  partitions = 1,
  items: readonly string[] = LAB_ITEMS,
  options: { sqlHooks?: boolean } = {},
): Promise<LikesFixture> {
  const db = await createTestDatabase({ partitions, ...options });
  const hooks = new Hooks();
  const likes = await LikeService.open(db.pool);
  for (const item of items) await likes.createItem(item);
  return {
    db,
    hooks,
    likes,
    consumer: new LikeConsumer(db.pool, { hooks }),
    rebuild: new LikeRebuild(db.pool, { hooks }),
    consumerWith: (applyBatch) => new LikeConsumer(db.pool, { hooks, applyBatch }),
    close: () => db.close(),
  };
}

export async function count(db: TestDatabase, sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql, values);
  return Number(rows[0]!.n);
}

export async function factCount(db: TestDatabase, itemId: string): Promise<number> {
  return count(db, "SELECT count(*) AS n FROM like_fact WHERE item_id = $1 AND liked", [itemId]);
}
