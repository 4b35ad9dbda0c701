/**
 * PostgreSQL dies (immediate shutdown, as a crash) while the delivery worker waits for a
 * receiver's answer inside its transaction; the receiver then answers 200, the worker's commit
 * fails, and after the cluster's restart (crash recovery) the worker, still the same loop in the
 * same process, sends that event again under its id and goes on in order. Nothing is lost.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { openLedger } from "../../src/ledger.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { EndpointRegistry } from "../../src/webhooks/endpoint-registry.ts";
import { PartitionWorker } from "../../src/workers/partition-worker.ts";
import { crashLab } from "../support/crash-cluster.ts";
import { pollUntil } from "../../support/poll.ts";
import { deliveryProblems } from "./delivery-check.ts";
import { FAST_RETRIES } from "./fixture.ts";
import { TestReceiver } from "./receiver.ts";

test(
  "PostgreSQL crashes and restarts mid-delivery: the unacknowledged event is sent again under its id, every event delivered in order",
  { timeout: 120_000 },
  async (t) => {
    const lab = await crashLab(t, "ledger-webhook-pg-restart-", { partitions: 2, poolSize: 4 });
    const receiver = await TestReceiver.start();
    t.after(() => receiver.close());
    const ledger = await openLedger(lab.pool);
    await ledger.likes.createItem("item-1");
    const { endpoint, secret } = await new EndpointRegistry(lab.pool, { allowPrivate: true }).create({
      url: receiver.url,
      events: ["like.created"],
    });
    receiver.secrets.push(secret);
    const users = Array.from({ length: 8 }, (_, i) => `fan-${i}`);
    for (const u of users) await ledger.likes.like(u, "item-1");
    const { rows } = await lab.pool.query<{ part: number; last: number }>(
      "SELECT part, last FROM like_seq ORDER BY part",
    );
    const last = new Map(rows.map((r) => [r.part, r.last]));

    let answered = 0;
    receiver.answer = () => (answered++ < 3 ? 200 : "hold");
    const delivery = new WebhookDelivery(lab.pool, FAST_RETRIES);
    let failedPasses = 0;
    const loop = new PartitionWorker("webhook-delivery", () => delivery.pass(), {
      idleMs: 20,
      maxBackoffMs: 200,
      onError: () => failedPasses++,
    });
    loop.start();
    t.after(() => loop.stop());
    const held = await receiver.waitHeld();
    await lab.cluster.crashImmediate();
    receiver.release(200); // answered, but the commit that would move the cursor cannot happen
    await pollUntil(
      "the worker saw the database gone",
      async () => failedPasses,
      (n) => n > 0,
      30_000,
    );
    await lab.cluster.restart();
    receiver.answer = () => 200;
    await pollUntil(
      "every event accepted",
      async () => deliveryProblems("likes", last, receiver.deliveries),
      (p) => !p.some((x) => x.startsWith("missing")),
      60_000,
    );
    t.diagnostic(
      `note held ${held.id}; failed passes while down: ${failedPasses}; requests: ${receiver.deliveries.map((d) => `${d.id}:${d.status ?? "cut"}`).join(" ")}`,
    );
    assert.deepEqual(deliveryProblems("likes", last, receiver.deliveries), []);
    assert.ok(
      receiver.deliveries.filter((d) => d.id === held.id).length >= 2,
      "the event whose cursor move was lost was sent again",
    );
    // The receiver records its 200 before the worker commits the cursor move: wait for the commits.
    await pollUntil(
      "every cursor at its partition's end",
      async () =>
        (
          await lab.pool.query<{ part: number; delivered_upto: number }>(
            "SELECT part, delivered_upto FROM webhook_cursor WHERE endpoint_id = $1 AND source = 'likes' ORDER BY part",
            [endpoint.id],
          )
        ).rows.map((r) => [r.part, r.delivered_upto]),
      (got) => JSON.stringify(got) === JSON.stringify(rows.map((r) => [r.part, r.last])),
      30_000,
    );
  },
);
