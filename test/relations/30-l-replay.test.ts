import { test } from "node:test";
import assert from "node:assert/strict";
import { formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { acct, allRelationEvents, deliverRelations, relationsFixture, scalar } from "./fixture.ts";

for (const partitions of [1, 4]) {
  test(`30-L P=${partitions} partial shuffled delivery stops the watermark at the first gap; a restart replay reaches 0,0,0`, async (t) => {
    const f = await relationsFixture(partitions, 200, [5, 50, 150]);
    t.after(() => f.close());
    const random = seededRandom(3012);
    for (let i = 0; i < 400; i++) {
      const a = acct(1 + Math.floor(random() * 60));
      const b = acct(1 + Math.floor(random() * 60));
      if (a === b) continue;
      const r = random();
      if (r < 0.55) await f.rel.follow(a, b);
      else if (r < 0.8) await f.rel.unfollow(a, b);
      else if (r < 0.95) await f.rel.decide(b, a, true);
      else await f.rel.block(a, b);
    }
    const events = await allRelationEvents(f);
    const partial = shuffle(events, random).slice(0, Math.floor(events.length * 0.6));
    await deliverRelations(f.projector, partial, 15);
    const delivered = new Set(partial.map((e) => `${e.part}:${e.seq}`));
    const expected: number[] = [];
    for (let part = 0; part < partitions; part++) {
      let w = 0;
      while (delivered.has(`${part}:${w + 1}`)) w++;
      expected.push(w);
    }
    const { rows } = await f.db.pool.query<{ applied_upto: number }>(
      "SELECT applied_upto FROM proj_watermark ORDER BY part",
    );
    const watermarks = rows.map((r) => r.applied_upto);
    const total = await scalar(f, "SELECT sum(last) AS n FROM event_seq");
    const mid = await projectionDiff(f.db.pool);
    t.diagnostic(`note after partial: watermark=${watermarks.join("+")}/${total} diff=${formatDiff(mid)}`);
    assert.deepEqual(watermarks, expected, "each watermark stops right before its partition's first undelivered seq");
    assert.ok(watermarks.reduce((a, b) => a + b, 0) < total);

    // A new projector connection replays everything from the start, with 30% duplicates.
    const replay = shuffle([...events, ...events.filter(() => random() < 0.3)], random);
    await deliverRelations(f.projector, replay, 25);
    const end = await projectionDiff(f.db.pool);
    const final = await scalar(f, "SELECT sum(applied_upto) AS n FROM proj_watermark");
    t.diagnostic(`note after restart replay: watermark=${final} diff=${formatDiff(end)}`);
    assert.equal(final, total);
    assert.equal(formatDiff(end), "0,0,0");
  });
}
