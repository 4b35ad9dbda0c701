/**
 * An endpoint registered before the post and account outboxes were webhook sources: the migration
 * that makes them sources gives it a cursor per partition of each, at the post outbox's end as it
 * stood (what a registration at that moment would have done) and at 0 of the new account outbox,
 * so it receives the posts and accounts written afterwards and none from before.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { initLedger } from "../../src/db/ledger-config.ts";
import { loadMigrations, migrate } from "../../src/db/migrate.ts";
import { openLedger } from "../../src/ledger.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { createEmptyDatabase } from "../support/test-db.ts";
import { FAST_RETRIES } from "./fixture.ts";
import { TestReceiver } from "./receiver.ts";

const SOURCES_MIGRATION = "037_post_account_webhooks.sql";

test("an endpoint registered before the migration gets post and account cursors at the ends as they stood, and then receives what follows", async (t) => {
  const db = await createEmptyDatabase({ poolSize: 6 });
  const receiver = await TestReceiver.start();
  t.after(async () => {
    await receiver.close();
    await db.close();
  });
  const migrations = await loadMigrations();
  const at = migrations.findIndex((m) => m.name === SOURCES_MIGRATION);
  assert.ok(at > 0, `${SOURCES_MIGRATION} is among the migrations`);
  await migrate(db.pool, migrations.slice(0, at));
  await initLedger(db.pool, { partitions: 2 });
  // The schema before: the endpoint as the registry wrote it then (four sources), and a post.
  await db.pool.query("INSERT INTO account (account_id) VALUES ('alice')");
  await db.pool.query("INSERT INTO item (item_id, kind) VALUES ('p-old', 'post')");
  await db.pool.query(
    "INSERT INTO post (post_id, author, visibility, body, part, acl_token) VALUES ('p-old', 'alice', 'PUBLIC', 'old', ledger_partition('alice', 2), 0)",
  );
  await db.pool.query(
    "INSERT INTO webhook_endpoint (endpoint_id, url, events, secret) VALUES ('whe_old', $1, '{*}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')",
    [receiver.url],
  );
  receiver.secrets.push("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  const { rows: ends } = await db.pool.query<{ part: number; last: number }>(
    "SELECT part, last FROM post_seq ORDER BY part",
  );

  await migrate(db.pool, migrations);
  const { rows: cursors } = await db.pool.query<{ source: string; part: number; delivered_upto: number }>(
    "SELECT source, part, delivered_upto::int FROM webhook_cursor WHERE endpoint_id = 'whe_old' ORDER BY source, part",
  );
  assert.deepEqual(cursors, [
    { source: "accounts", part: 0, delivered_upto: 0 },
    { source: "accounts", part: 1, delivered_upto: 0 },
    ...ends.map((e) => ({ source: "posts", part: e.part, delivered_upto: Number(e.last) })),
  ]);
  assert.ok(
    ends.some((e) => Number(e.last) > 0),
    "the old post is behind the cursor (the control: a cursor at 0 would send it)",
  );

  const ledger = await openLedger(db.pool);
  const post = await ledger.posts.createPost("alice", "PUBLIC", "new");
  await ledger.relations.upsertAccount("bob");
  const delivery = new WebhookDelivery(db.pool, FAST_RETRIES);
  while ((await delivery.pass()) > 0);
  assert.deepEqual(
    receiver.deliveries.map((d) => [d.parsed.type, d.parsed.data.postId ?? d.parsed.data.accountId]).sort(),
    [
      ["account.created", "bob"],
      ["post.created", post.postId],
    ],
  );
});
