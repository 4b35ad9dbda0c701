/**
 * A webhook lab: a test database with P partitions, the ledger over it (to write real events),
 * a real receiver on loopback, the endpoint registry and an in-process delivery worker that the
 * test drives pass by pass (no loop runs by itself).
 */
import assert from "node:assert/strict";
import type { TestContext } from "node:test";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { WebhookDelivery, type DeliveryOptions } from "../../src/webhooks/delivery-worker.ts";
import { EndpointRegistry, type RegistryOptions } from "../../src/webhooks/endpoint-registry.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { TestReceiver } from "./receiver.ts";
import { CURSOR_END, CURSOR_END_JOINS } from "../../src/webhooks/webhook-events.ts";

export interface WebhookLab {
  db: TestDatabase;
  ledger: Ledger;
  receiver: TestReceiver;
  registry: EndpointRegistry;
  delivery: WebhookDelivery;
  /** Registers an endpoint on the receiver (or `url`) and teaches the receiver its secret. */
  register(events?: string[], url?: string): Promise<{ id: string; secret: string }>;
  /** Passes until no cursor of any endpoint has a due event left, or `until` holds (bounded). */
  deliverAll(until?: () => Promise<boolean> | boolean): Promise<void>;
  /** Accounts, items and a post to write events about. */
  seed(): Promise<{ postId: string }>;
}

/** A public address for registrations that are accepted but never delivered to (the documentation ranges are refused). */
export const PUBLIC_URL = "https://8.8.8.8/hook";

export const FAST_RETRIES: DeliveryOptions = {
  retryBaseMs: 1,
  maxBackoffMs: 5,
  limits: { allowPrivate: true, responseTimeoutMs: 5_000, connectTimeoutMs: 2_000 },
};

export async function webhookLab(
  t: TestContext,
  options: { partitions?: number; registry?: RegistryOptions; delivery?: DeliveryOptions } = {},
): Promise<WebhookLab> {
  const db = await createTestDatabase({ partitions: options.partitions ?? 2, poolSize: 10 });
  const receiver = await TestReceiver.start();
  t.after(async () => {
    await receiver.close();
    await db.close();
  });
  const ledger = await openLedger(db.pool);
  const registry = new EndpointRegistry(db.pool, { allowPrivate: true, failingAfter: 3, ...options.registry });
  const delivery = new WebhookDelivery(db.pool, { ...FAST_RETRIES, ...options.delivery });
  const lab: WebhookLab = {
    db,
    ledger,
    receiver,
    registry,
    delivery,
    async register(events = ["*"], url = receiver.url) {
      const { endpoint, secret } = await registry.create({ url, events });
      receiver.secrets.push(secret);
      return { id: endpoint.id, secret };
    },
    async deliverAll(until) {
      await pollUntil(
        "every due webhook delivered",
        async () => {
          await delivery.pass();
          if (until) return until();
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM (${pendingCursorsSql}) p`,
          );
          return rows[0]!.n === 0;
        },
        (done) => done,
        30_000,
        5,
      );
    },
    async seed() {
      for (const id of ["alice", "bob", "carol", "dave"]) await ledger.relations.upsertAccount(id);
      await ledger.relations.upsertAccount("priv", { private: true });
      await ledger.likes.createItem("item-1");
      const post = await ledger.posts.createPost("alice", "PUBLIC", "hello");
      return { postId: post.postId };
    },
  };
  return lab;
}

/** Cursors of endpoints that are not paused with events past them (due or not). */
const pendingCursorsSql = `
  SELECT 1 FROM webhook_cursor c JOIN webhook_endpoint e USING (endpoint_id)
    ${CURSOR_END_JOINS}
   WHERE NOT e.paused AND c.delivered_upto < ${CURSOR_END}`;

/** Every partition's seqs strictly increasing by one from its first delivery: in order, nothing skipped, no duplicate. */
export function assertContiguous(byPartition: Map<string, number[]>, where: string): void {
  for (const [key, seqs] of byPartition) {
    const expected = Array.from({ length: seqs.length }, (_, i) => seqs[0]! + i);
    assert.deepEqual(seqs, expected, `${where}: ${key} delivered in order without gaps or repeats`);
  }
}
