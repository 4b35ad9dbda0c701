import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, ok, startApi, type LikeCount, type LikeOutcome } from "./harness.ts";

for (const partitions of [1, 4]) {
  test(`api P=${partitions} like flow: CHANGED then NOOP, read-your-writes before any consumer run, a stale count within pendingForItem, exact after drain`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    const alice = await h.as("alice");
    const bob = await h.as("bob");

    assert.deepEqual(ok(await admin.put("/v1/items/item-1")), { id: "item-1" });
    assert.deepEqual(
      ok(await admin.put("/v1/items/item-1")),
      { id: "item-1" },
      "making an item likeable twice is idempotent",
    );

    const liked = ok(await alice.put<LikeOutcome>("/v1/items/item-1/likes/me"));
    assert.deepEqual(Object.keys(liked).sort(), ["liked", "outcome", "seq", "version"]);
    assert.equal(liked.outcome, "CHANGED");
    assert.equal(liked.liked, true);
    assert.equal(liked.version, 1);
    assert.ok(liked.seq >= 1, `a CHANGED like carries its event's seq, got ${liked.seq}`);
    assert.deepEqual(ok(await alice.put<LikeOutcome>("/v1/items/item-1/likes/me")), {
      outcome: "NOOP",
      liked: true,
      version: 1,
      seq: 0,
    });

    // Read-your-writes: from the fact row, before any consumer has run.
    assert.deepEqual(ok(await alice.get("/v1/items/item-1/likes/me")), { liked: true, version: 1 });
    assert.deepEqual(ok(await bob.get("/v1/items/item-1/likes/me")), { liked: false, version: 0 });

    const before = ok(await alice.get<LikeCount>("/v1/items/item-1/like-count?allowedLag=0"));
    t.diagnostic(`note before drain: ${JSON.stringify(before)}`);
    assert.deepEqual(Object.keys(before).sort(), ["count", "lag", "pendingForItem", "source", "stale"]);
    assert.equal(before.stale, true, "lag 1 > allowedLag 0");
    assert.ok(before.lag >= 1);
    assert.ok(before.pendingForItem >= 1 && before.pendingForItem <= before.lag);
    assert.ok(Math.abs(before.count - 1) <= before.pendingForItem, `|${before.count} - 1| > ${before.pendingForItem}`);
    const byDefault = ok(await alice.get<LikeCount>("/v1/items/item-1/like-count"));
    assert.equal(byDefault.stale, false, "the default allowedLag is 16: a lag of 1 is not stale");

    await h.ledger.likeConsumer.drain();
    assert.deepEqual(ok(await bob.get("/v1/items/item-1/like-count?allowedLag=0")), {
      count: 1,
      lag: 0,
      pendingForItem: 0,
      stale: false,
      source: "database",
    });

    assert.deepEqual(ok(await alice.delete<LikeOutcome>("/v1/items/item-1/likes/me")), {
      outcome: "CHANGED",
      liked: false,
      version: 2,
      seq: liked.seq + 1,
    });
    assert.deepEqual(ok(await alice.delete<LikeOutcome>("/v1/items/item-1/likes/me")), {
      outcome: "NOOP",
      liked: false,
      version: 2,
      seq: 0,
    });
    assert.deepEqual(ok(await alice.get("/v1/items/item-1/likes/me")), { liked: false, version: 2 });
    const unliked = ok(await alice.get<LikeCount>("/v1/items/item-1/like-count?allowedLag=0"));
    assert.ok(unliked.stale && Math.abs(unliked.count - 0) <= unliked.pendingForItem, JSON.stringify(unliked));
    await h.ledger.likeConsumer.drain();
    assert.deepEqual(ok(await alice.get("/v1/items/item-1/like-count?allowedLag=0")), {
      count: 0,
      lag: 0,
      pendingForItem: 0,
      stale: false,
      source: "database",
    });

    // A missing item is 404 NOT_FOUND on every like route, with one body.
    const missing = [
      await alice.put("/v1/items/no-such-item/likes/me"),
      await alice.delete("/v1/items/no-such-item/likes/me"),
      await alice.get("/v1/items/no-such-item/likes/me"),
      await alice.get("/v1/items/no-such-item/like-count"),
      await alice.get("/v1/items/no-such-item/likes"),
    ];
    for (const res of missing) assertError(res, 404, "ITEM_NOT_FOUND");
    assert.equal(new Set(missing.map((r) => r.text)).size, 1, "one body for a missing item");

    for (const lag of ["-1", "x", "1.5", "", "1e400"]) {
      assertError(
        await alice.get(`/v1/items/item-1/like-count?allowedLag=${lag}`),
        400,
        "INVALID_INPUT",
        `allowedLag=${lag}`,
      );
    }
    assertError(
      await alice.get("/v1/items/item-1/like-count?allowedLag=99999999999999999999"),
      400,
      "INVALID_INPUT",
      "an allowedLag beyond 2^53",
    );
  });
}
