import { test } from "node:test";
import assert from "node:assert/strict";
import { projectNaive } from "./negative-controls.ts";
import { formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { acct, allRelationEvents, deliverRelations, relationsFixture, scalar } from "./fixture.ts";
import type { RelationEvent } from "../../src/relations/types.ts";

test("30-F P=1 arrivals v2,v1,v1 -> [applied, stale, dup]; the view stays REMOVED", async (t) => {
  const f = await relationsFixture(1, 10);
  t.after(() => f.close());
  await f.rel.follow(acct(1), acct(2));
  await f.rel.unfollow(acct(1), acct(2));
  const [v1, v2] = await allRelationEvents(f);
  const verdicts = [];
  for (const e of [v2!, v1!, v1!]) verdicts.push(...(await f.projector.applyBatch([e])).verdicts);
  const { rows } = await f.db.pool.query("SELECT state, version FROM proj_follower");
  t.diagnostic(`note arrivals v2,v1,v1 -> [${verdicts.join(", ")}] view=${rows[0]?.state}`);
  assert.deepEqual(verdicts, ["applied", "stale", "dup"]);
  assert.deepEqual(rows, [{ state: "REMOVED", version: 2 }]);
  assert.equal(await scalar(f, "SELECT coalesce(sum(n), 0) AS n FROM proj_count"), 0);
});

for (const partitions of [1, 4]) {
  test(`30-G P=${partitions} 300 pairs, 30% duplicated, shuffled: naive resurrects, versioned with 4 workers has diff 0,0,0`, async (t) => {
    const f = await relationsFixture(partitions, 400, [11, 22, 33, 44, 55]);
    t.after(() => f.close());
    const random = seededRandom(302026);
    for (let i = 0; i < 300; i++) {
      const a = acct(1 + Math.floor(random() * 400));
      let b = acct(1 + Math.floor(random() * 400));
      if (a === b) b = acct((Number(a.slice(5)) % 400) + 1);
      const ops = 2 + Math.floor(random() * 3);
      for (let k = 0; k < ops; k++) {
        if (k % 2 === 0) await f.rel.follow(a, b);
        else await f.rel.unfollow(a, b);
        if (random() < 0.2) await f.rel.decide(b, a, true);
      }
    }
    const events = await allRelationEvents(f);
    const deliveries = shuffle([...events, ...events.filter(() => random() < 0.3)], random);
    t.diagnostic(`note events=${events.length} deliveries=${deliveries.length} seed=302026`);

    await deliverRelations(f.projectorWith(projectNaive), deliveries, 25);
    const naive = await projectionDiff(f.db.pool);
    t.diagnostic(
      `note naive: resurrected=${naive.resurrected} missing=${naive.missing} wrongCounts=${naive.wrongCounts}`,
    );
    assert.ok(naive.resurrected > 0, "negative control: arrival-order overwrite resurrects removed relations");

    await f.db.pool.query("TRUNCATE proj_follower, proj_count, proj_seen");
    await f.db.pool.query("UPDATE proj_watermark SET applied_upto = 0");
    const workers = 4;
    const share: RelationEvent[][] = Array.from({ length: workers }, () => []);
    deliveries.forEach((e, i) => share[i % workers]!.push(e));
    const results = await Promise.all(share.map((mine) => deliverRelations(f.projector, mine, 20)));
    const verdicts = results.reduce((a, b) => ({
      applied: a.applied + b.applied,
      stale: a.stale + b.stale,
      dup: a.dup + b.dup,
    }));
    const diff = await projectionDiff(f.db.pool);
    const watermark = await scalar(f, "SELECT sum(applied_upto) AS n FROM proj_watermark");
    t.diagnostic(
      `note versioned: verdicts={applied=${verdicts.applied}, dup=${verdicts.dup}, stale=${verdicts.stale}} resurrected=${diff.resurrected} missing=${diff.missing} wrongCounts=${diff.wrongCounts}`,
    );
    assert.equal(formatDiff(diff), "0,0,0");
    assert.equal(watermark, events.length);
    assert.equal(verdicts.applied + verdicts.stale + verdicts.dup, deliveries.length);
    assert.equal(verdicts.dup, deliveries.length - events.length);
  });
}
