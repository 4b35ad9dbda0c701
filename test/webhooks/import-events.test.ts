/**
 * What an import tells webhook receivers (docs/webhooks.md, "Imports"): its accounts and blocks
 * go out as events, and so does a follow of a pair with history (written through the live
 * function); the follows and likes it writes set-based have no event, and the report counts
 * exactly those. The control is that follow of a pair with history: the same kind of line,
 * delivered, and not counted.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { importFacts } from "../../src/portability/import.ts";
import { formatImportReport } from "../../src/cli/commands/import.ts";
import { webhookLab } from "./fixture.ts";

const lines = (facts: readonly object[]) => Readable.from([facts.map((f) => JSON.stringify(f)).join("\n") + "\n"]);

test("an import sends its accounts' and blocks' events and a live-path follow's; the report counts the set-based follows and likes that sent none", async (t) => {
  const lab = await webhookLab(t, { partitions: 2 });
  await lab.seed();
  // bob -> carol has history (a follow, then an unfollow): the import's follow of it takes the live path.
  await lab.ledger.relations.follow("bob", "carol");
  await lab.ledger.relations.unfollow("bob", "carol");
  await lab.register(["*"]);

  const report = await importFacts(
    lab.db.pool,
    lines([
      { kind: "account", id: "gina", private: true },
      { kind: "account", id: "hal" },
      { kind: "account", id: "alice", hideCollections: true },
      { kind: "item", id: "item-2" },
      { kind: "follow", follower: "gina", followee: "hal", state: "ACTIVE" },
      { kind: "follow", follower: "hal", followee: "alice", state: "ACTIVE" },
      { kind: "follow", follower: "bob", followee: "carol", state: "ACTIVE" },
      { kind: "block", blocker: "hal", blocked: "dave" },
      { kind: "like", user: "gina", item: "item-2" },
      { kind: "like", user: "hal", item: "item-2" },
    ]),
  );
  await lab.deliverAll();
  const got = lab.receiver.deliveries.map((d) => d.parsed);
  const summary = got
    .map((b) => {
      const x = b.data;
      if (b.type.startsWith("account.")) return `${b.type} ${String(x.accountId)}`;
      if (b.type.startsWith("follow.")) return `${b.type} ${String(x.follower)}->${String(x.followee)}`;
      if (b.type.startsWith("block.")) return `${b.type} ${String(x.blocker)}->${String(x.blocked)}`;
      return `${b.type} ${String(x.userId)} ${String(x.itemId)}`;
    })
    .sort();
  assert.deepEqual(summary, [
    "account.created gina",
    "account.created hal",
    "account.updated alice",
    "block.created hal->dave",
    "follow.created bob->carol",
  ]);
  assert.deepEqual(report.webhooks.withoutEvents, { follows: 2, likes: 2 });
  assert.equal(report.applied.follow_writes, 1, "the follow with history took the live path");
  const text = formatImportReport(report);
  assert.match(text, /webhooks: follows=2 likes=2 written without events/);
  assert.match(text, /social-ledger export/);
});
