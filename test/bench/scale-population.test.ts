/**
 * The scale bench's generator (support/scale-population.ts) leaves the state live writes
 * would: the full audit is clean after it, and stays clean after live writes on the generated
 * facts, a drain and a prune. The negative controls skip one table's write each: the audit sees
 * every one of them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { openLedger } from "../../src/ledger.ts";
import { readCount } from "../../src/likes/like-audit.ts";
import { listLikers } from "../../src/likes/like-reads.ts";
import { followerCount } from "../../src/relations/relation-reads.ts";
import { pruneRetained } from "../../src/retention/retention.ts";
import {
  accountId,
  generatePopulation,
  secondaryIndexes,
  type GeneratedTable,
} from "../../support/scale-population.ts";
import { createTestDatabase } from "../support/test-db.ts";

test(
  "a generated population of 20k likes passes the full audit, before and after live writes and a prune",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 4, poolSize: 8 });
    t.after(() => db.close());
    const ledger = await openLedger(db.pool);
    const indexesBefore = await secondaryIndexes(db.pool);
    const pop = await generatePopulation(ledger, { likes: 20_000, chunk: 7_000 });
    assert.deepEqual(await secondaryIndexes(db.pool), indexesBefore, "the dropped indexes are back, same definitions");

    const shape = (
      await db.pool.query<{
        likes: number;
        items: number;
        active: number;
        pending: number;
        blocks: number;
        private: number;
        requests: number;
      }>(
        `SELECT (SELECT count(*) FROM like_fact WHERE liked)::int AS likes, (SELECT count(*) FROM item)::int AS items,
            (SELECT count(*) FROM relation WHERE state = 'ACTIVE')::int AS active,
            (SELECT count(*) FROM relation WHERE state = 'PENDING')::int AS pending,
            (SELECT count(*) FROM block)::int AS blocks, (SELECT count(*) FROM account WHERE private)::int AS private,
            (SELECT count(*) FROM notification WHERE type = 'follow_request')::int AS requests`,
      )
    ).rows[0]!;
    assert.equal(shape.likes, 20_000);
    assert.equal(shape.items, 2_000);
    assert.ok(
      shape.pending > 0 && shape.requests === shape.pending,
      `pending requests and their notifications: ${JSON.stringify(shape)}`,
    );
    assert.equal(shape.blocks, pop.blocks);
    assert.ok(shape.active + shape.pending <= pop.follows && shape.active + shape.pending > pop.follows * 0.9);
    assert.equal((await readCount(db.pool, pop.hotItem, 0)).n, pop.accounts, "every user likes the hot item");
    assert.equal(
      (await followerCount(db.pool, pop.hub, 0)).count,
      Math.floor(pop.accounts / 2),
      "every even account follows the hub",
    );
    assert.equal((await listLikers(db.pool, pop.hotItem, { limit: 3 })).likers.length, 3);

    const clean = await fullAudit(ledger);
    assert.equal(clean.clean, true, JSON.stringify(clean));

    // Live writes on generated pairs: an unlike, a like again, an unfollow, a follow, then a prune.
    await ledger.likes.unlike(accountId(5), pop.hotItem);
    await ledger.likes.like(accountId(5), pop.hotItem);
    await ledger.likes.unlike(accountId(8), pop.hotItem);
    await ledger.relations.unfollow(accountId(2), pop.hub);
    await ledger.relations.follow(accountId(3), pop.hub);
    await ledger.likeConsumer.drain();
    await ledger.projector.drain();
    await ledger.notifications.drain();
    assert.equal((await readCount(db.pool, pop.hotItem, 0)).n, pop.accounts - 1);
    await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 0 });
    const after = await fullAudit(ledger);
    assert.equal(after.clean, true, JSON.stringify(after));
  },
);

test("control: skipping any one table's write, the full audit is not clean", { timeout: 180_000 }, async (t) => {
  const tables: GeneratedTable[] = [
    "like_fact",
    "like_outbox_pruned",
    "like_count",
    "relation",
    "relation_event_pruned",
    "proj_follower",
    "proj_count",
    "notification",
  ];
  for (const table of tables) {
    await t.test(table, async () => {
      const db = await createTestDatabase({ partitions: 4, poolSize: 4 });
      try {
        const ledger = await openLedger(db.pool);
        await generatePopulation(ledger, { likes: 2_000, skip: [table] });
        const audit = await fullAudit(ledger);
        assert.equal(audit.clean, false, `without ${table} the audit must fail: ${JSON.stringify(audit)}`);
      } finally {
        await db.close();
      }
    });
  }
});
