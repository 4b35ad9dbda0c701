/**
 * The JetStream relay's position caps outbox retention (docs/transport-jetstream.md, "Retention"):
 * every event the relay has not published stays in the outbox, even when the consumers have
 * already applied it (through the gap filler). No broker is needed: the relay's position and its
 * retention hold are rows in PostgreSQL.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { pruneRetained } from "../../src/retention/retention.ts";
import { releaseRetention } from "../../src/db/retention-boundary.ts";
import { openLedger } from "../../src/ledger.ts";
import {
  advanceRelayWatermark,
  ensureRelayRows,
  readRelayWatermark,
  RELAY_RETENTION_HOLDER,
} from "../../src/transport/relay-watermark.ts";
import { createTestDatabase } from "../support/test-db.ts";

test("relay retention: the outbox above the relay's position survives a prune to the consumer's watermark; without the hold it would not; a relay row below the floor moves up to it at start", async (t) => {
  const db = await createTestDatabase({ partitions: 1 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  await ledger.likes.createItem("item-1");
  await ensureRelayRows(db.pool, "likes"); // the relay starts with nothing published: position 0
  for (let u = 0; u < 10; u++) await ledger.likes.like(`user-${u}`, "item-1");
  await ledger.likeConsumer.drain(); // the consumer's watermark is 10 (as after a gap fill)
  await ledger.notifications.drain(); // and the notification view's (the prune waits for both)
  await advanceRelayWatermark(db.pool, "likes", 0, 4); // the relay has published 1..4

  const outbox = async () =>
    (await db.pool.query<{ seq: string }>("SELECT seq FROM like_outbox WHERE part = 0 ORDER BY seq")).rows.map((r) =>
      Number(r.seq),
    );
  const noMargin = { keepLast: 0, keepSeconds: 0 };
  const held = await pruneRetained(db.pool, noMargin);
  const likes = held.kinds.find((k) => k.kind === "likes")!;
  assert.deepEqual(
    likes.partitions.map((p) => ({ watermark: p.watermark, held: p.held, boundary: p.boundary })),
    [{ watermark: 10, held: 4, boundary: 4 }],
  );
  assert.deepEqual(await outbox(), [5, 6, 7, 8, 9, 10], "the relay still has to publish 5..10");
  assert.equal((await ledger.likeConsumer.fetchRange(0, 5, 10)).length, 6, "and can read them");

  // Negative control: without the relay's hold the same prune takes the unpublished events.
  assert.equal(await releaseRetention(db.pool, RELAY_RETENTION_HOLDER), 1);
  await pruneRetained(db.pool, noMargin);
  assert.deepEqual(await outbox(), [], "without the hold, 5..10 are gone before the relay published them");

  // The relay's row (4) is now below the floor (10): at its next start it moves up to the floor and
  // holds there, instead of waiting forever for rows that are gone (the consumers have them all).
  await ensureRelayRows(db.pool, "likes");
  assert.equal(await readRelayWatermark(db.pool, "likes", 0), 10);
  const { rows } = await db.pool.query<{ upto: string }>(
    "SELECT upto FROM retention_hold WHERE holder = $1 AND kind = 'likes' AND part = 0",
    [RELAY_RETENTION_HOLDER],
  );
  assert.deepEqual(
    rows.map((r) => Number(r.upto)),
    [10],
  );
});
