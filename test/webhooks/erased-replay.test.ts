/**
 * A webhook replay after an erasure (docs/erasure.md, "What remains, and the id afterwards"): the
 * block outbox's events that named the erased account are redacted, so a replay from the start
 * re-sends the other accounts' block history and nothing of the erased one's. The control: the
 * same replay before the erasure re-sends the erased account's blocks too.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { webhookLab } from "./fixture.ts";

test("a replay of the block outbox after an erasure sends nothing naming the erased account; before it, the same replay did", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["block.created", "block.removed"]);
  await lab.ledger.relations.block("carol", "dave");
  await lab.ledger.relations.block("dave", "alice");
  await lab.ledger.relations.block("bob", "carol");
  await lab.deliverAll();
  const named = () =>
    lab.receiver.deliveries
      .map((d) => JSON.parse(d.body) as { type: string; data: { blocker: string; blocked: string } })
      .map((b) => `${b.type} ${b.data.blocker}->${b.data.blocked}`);
  assert.deepEqual(named(), ["block.created carol->dave", "block.created dave->alice", "block.created bob->carol"]);

  // The control: a replay re-sends the whole block history, dave's included.
  await lab.registry.replay(id, { source: "blocks", partition: 0, fromSeq: 1 });
  await lab.deliverAll();
  assert.deepEqual(named().slice(3), [
    "block.created carol->dave",
    "block.created dave->alice",
    "block.created bob->carol",
  ]);

  await lab.ledger.erasure.start("dave", "admin");
  await lab.ledger.erasure.run("dave");
  await lab.deliverAll();
  // The erasure's deletion of dave's own block was written redacted: nothing new was sent.
  assert.equal(named().length, 6);
  await lab.registry.replay(id, { source: "blocks", partition: 0, fromSeq: 1 });
  await lab.deliverAll();
  assert.deepEqual(named().slice(6), ["block.created bob->carol"]);
  assert.ok(!lab.receiver.deliveries.slice(6).some((d) => d.body.includes("dave")));
  // carol's block of dave stays in force.
  assert.equal(
    (await lab.db.pool.query("SELECT 1 FROM block WHERE blocker = 'carol' AND blocked = 'dave'")).rowCount,
    1,
  );
});
