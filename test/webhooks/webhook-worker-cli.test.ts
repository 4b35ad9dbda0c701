/**
 * `social-ledger webhook-worker` as a real process of its own beside the database: it delivers,
 * two of them share the cursors without sending a partition twice at once, SIGTERM ends it with 0,
 * and bad input exits 2 with a one-line message.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { openLedger } from "../../src/ledger.ts";
import { EndpointRegistry } from "../../src/webhooks/endpoint-registry.ts";
import { CliChild, childEnv, runCli } from "../cli/cli-child.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { deliveryProblems } from "./delivery-check.ts";
import { TestReceiver } from "./receiver.ts";

test(
  "two webhook-worker processes deliver every event once per partition in order; SIGTERM exits 0",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
    const receiver = await TestReceiver.start();
    const children: CliChild[] = [];
    t.after(async () => {
      for (const c of children) if (c.alive()) await c.stop("SIGKILL");
      await receiver.close();
      await db.close();
    });
    const ledger = await openLedger(db.pool);
    await ledger.likes.createItem("item-1");
    const { secret } = await new EndpointRegistry(db.pool, { allowPrivate: true }).create({
      url: receiver.url,
      events: ["like.created"],
    });
    receiver.secrets.push(secret);
    for (let i = 0; i < 10; i++) await ledger.likes.like(`fan-${i}`, "item-1");
    const { rows } = await db.pool.query<{ part: number; last: number }>(
      "SELECT part, last FROM like_seq ORDER BY part",
    );
    const env = childEnv({ DATABASE_URL: db.url, LEDGER_WEBHOOK_ALLOW_PRIVATE: "1", LOG_LEVEL: "info" });
    for (const name of ["hooks#1", "hooks#2"]) {
      const child = new CliChild(name, ["webhook-worker", "--loops", "2"], env);
      children.push(child);
      await child.waitFor(/"msg":"started"/, 60_000);
    }
    await receiver.waitAccepted(10, 60_000);
    assert.deepEqual(deliveryProblems("likes", new Map(rows.map((r) => [r.part, r.last])), receiver.deliveries), []);
    assert.equal(receiver.deliveries.length, 10, "no event twice");
    for (const child of children) assert.deepEqual(await child.stop("SIGTERM"), { code: 0, signal: null });
  },
);

test("webhook-worker with no loops to run is a usage error (exit 2, one line)", async () => {
  const result = await runCli(
    ["webhook-worker"],
    childEnv({ LEDGER_WEBHOOK_LOOPS: "0", DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" }),
  );
  assert.equal(result.code, 2, result.stderr);
  assert.match(
    result.stderr.trim(),
    /^social-ledger webhook-worker: --loops \(or LEDGER_WEBHOOK_LOOPS\) must be at least 1/,
  );
  const bad = await runCli(["webhook-worker"], childEnv({ LEDGER_WEBHOOK_TIMEOUT_MS: "fast" }));
  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /LEDGER_WEBHOOK_TIMEOUT_MS: must be an integer/);
});
