/**
 * The webhook worker's memory of what endpoints acknowledged (src/webhooks/lost-deliveries.ts): what a
 * promotion's realignment is given, and that it stays bounded in time as well as per cursor.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DeliveryMemory, type DeliveredEvent } from "../../src/webhooks/lost-deliveries.ts";

const T0 = Date.parse("2026-12-04T10:00:00Z");

function delivered(seq: number, atMs: number, part = 0): DeliveredEvent {
  return {
    endpointId: "wh_a",
    source: "likes",
    part,
    seq,
    timeline: 1,
    webhookId: `evt_likes_${part}_${seq}`,
    deliveredAt: new Date(T0 + atMs),
  };
}

const seqs = (events: DeliveredEvent[]) => events.map((d) => `${d.part}/${d.seq}`).sort();

test("a quiet cursor's deliveries are forgotten once the newest delivery anywhere is a window later", () => {
  const memory = new DeliveryMemory(1_000, 60_000);
  memory.remember(delivered(1, 0, 3));
  memory.remember(delivered(1, 10_000, 5));
  for (let s = 2; s <= 20; s++) memory.remember(delivered(s, s * 4_000, 5));
  // Partition 3 last delivered at 0, partition 5 up to 80 s: a minute's window keeps 5's from 20 s.
  assert.deepEqual(seqs(memory.take()), Array.from({ length: 16 }, (_, i) => `5/${i + 5}`).sort());
});

test("age counts from the newest delivery, not the clock: after the last delivery nothing is forgotten", () => {
  const memory = new DeliveryMemory(1_000, 60_000);
  memory.remember(delivered(1, 0));
  memory.remember(delivered(2, 1_000));
  // The primary died here; the realignment that takes the memory may come long after.
  assert.deepEqual(seqs(memory.take()), ["0/1", "0/2"]);
  assert.deepEqual(memory.take(), [], "taken once");
});

test("a busy cursor keeps only its newest perCursor within the window", () => {
  const memory = new DeliveryMemory(3, 60_000);
  for (let s = 1; s <= 10; s++) memory.remember(delivered(s, s));
  assert.deepEqual(seqs(memory.take()), ["0/10", "0/8", "0/9"]);
});
