import { test } from "node:test";
import assert from "node:assert/strict";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { transactionStats } from "../../src/db/transaction.ts";
import { acct, relationsFixture, scalar } from "./fixture.ts";

for (const partitions of [1, 4]) {
  test(`30-D P=${partitions} 16 workers follow the same pair: CHANGED=1 NOOP=15, one event`, async (t) => {
    const f = await relationsFixture(partitions, 10);
    t.after(() => f.close());
    const results = await runWorkers(16, () => f.rel.follow(acct(1), acct(2)));
    const changed = results.filter((r) => r.outcome === "CHANGED").length;
    const noop = results.filter((r) => r.outcome === "NOOP").length;
    const errors = 16 - changed - noop;
    const version = await scalar(f, "SELECT version AS n FROM relation WHERE follower = $1 AND followee = $2", [
      acct(1),
      acct(2),
    ]);
    const events = await scalar(f, "SELECT count(*) AS n FROM relation_event");
    t.diagnostic(`note CHANGED=${changed} NOOP=${noop} errors=${errors} version=${version} events=${events}`);
    assert.deepEqual(
      { changed, noop, errors, version, events },
      { changed: 1, noop: 15, errors: 0, version: 1, events: 1 },
    );
  });

  test(`30-E P=${partitions} concurrent follow/unfollow over many pairs: versions contiguous and equal to event counts`, async (t) => {
    const f = await relationsFixture(partitions, 20, [3, 7]);
    t.after(() => f.close());
    const retriesBefore = transactionStats.retries;
    await runWorkers(8, async (w) => {
      const random = seededRandom(3005 + w);
      for (let i = 0; i < 60; i++) {
        const a = acct(1 + Math.floor(random() * 8));
        const b = acct(1 + Math.floor(random() * 8));
        if (a === b) continue;
        const r = random();
        if (r < 0.5) await f.rel.follow(a, b);
        else if (r < 0.85) await f.rel.unfollow(a, b);
        else await f.rel.decide(b, a, random() < 0.5);
      }
    });
    const audit = await auditRelations(f.db.pool);
    const events = await scalar(f, "SELECT count(*) AS n FROM relation_event");
    t.diagnostic(
      `note events=${events} audit=${JSON.stringify(audit)} tx retries observed (40001/40P01): ${transactionStats.retries - retriesBefore}`,
    );
    assert.ok(events > 0);
    assert.ok(relationAuditClean(audit), JSON.stringify(audit));
    assert.equal(
      await scalar(
        f,
        `SELECT count(*) AS n FROM relation r WHERE r.version <> (SELECT coalesce(max(version), 0) FROM relation_event e WHERE e.follower = r.follower AND e.followee = r.followee)`,
      ),
      0,
    );
  });
}
