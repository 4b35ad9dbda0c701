import { test } from "node:test";
import assert from "node:assert/strict";
import { auditFeed, feedAuditClean } from "../../src/feed/feed-audit.ts";
import { createWorkers } from "../../src/ledger.ts";
import { pollUntil } from "../../support/poll.ts";
import { expectedRows, feedFixture, inboxRows } from "./fixture.ts";

const USERS = Array.from({ length: 12 }, (_, i) => `u${String(i).padStart(2, "0")}`);

test("the service's consumer loops (createWorkers) keep every inbox equal to the truth under concurrent posts, follows, unfollows, blocks and deletions", async (t) => {
  const fx = await feedFixture(4, USERS, { maxItems: 6 });
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const failures: string[] = [];
  const workers = createWorkers(ledger, {
    idleMs: 10,
    loops: 2,
    onError: (err, worker) => failures.push(`${worker}: ${String(err)}`),
  });
  assert.ok(
    workers.some((w) => w.name.startsWith("feed#")),
    "createWorkers runs a feed loop",
  );
  for (const w of workers) w.start();
  t.after(() => Promise.all(workers.map((w) => w.stop())));
  // Writers in parallel, one per user: each posts, follows, unfollows, blocks and deletes in its own order.
  await Promise.all(
    USERS.map(async (u, i) => {
      const mine: string[] = [];
      for (let round = 0; round < 4; round++) {
        mine.push((await ledger.posts.createPost(u, round % 3 === 2 ? "FOLLOWERS" : "PUBLIC", `${u} ${round}`)).postId);
        await ledger.relations.follow(u, USERS[(i + round + 1) % USERS.length]!);
        if (round === 2) await ledger.relations.unfollow(u, USERS[(i + 2) % USERS.length]!);
        if (round === 3 && i % 4 === 0) await ledger.relations.block(u, USERS[(i + 1) % USERS.length]!);
        if (round === 3 && i % 3 === 0) await ledger.posts.deletePost(u, mine[0]!);
      }
    }),
  );
  const audit = await pollUntil(
    "feed lag 0",
    () => auditFeed(db.pool, 6),
    (a) => a.lag === 0,
  );
  assert.ok(feedAuditClean(audit), JSON.stringify(audit));
  assert.deepEqual(failures, [], "no batch failed (a deadlock would be one)");
  const inbox = await inboxRows(db.pool);
  // Without trims the inbox would be the truth's newest 6; with them, it holds no more than the truth.
  const truth = new Set(await expectedRows(db.pool, 1_000));
  assert.ok(
    inbox.every((r) => truth.has(r)),
    "no inbox row outside the truth",
  );
});
