import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { readSide, readSideClean, writeSide, writeSideClean, type ReadSideAudit } from "../../src/likes/like-audit.ts";
import { addStats, emptyStats } from "../../src/likes/like-consumer.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { LAB_ITEMS, likesFixture, user } from "./fixture.ts";
import { deliver } from "./delivery.ts";

const WRITERS = 8;
const REQUESTS_PER_WRITER = 300;
const REBUILD_EVERY_MS = 100;

for (const partitions of [1, 4]) {
  test(`32-J P=${partitions} everything at once: 8 writers x 300, 3 consumers, redelivery, rebuild every 100 ms, sampler`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    let writersDone = false;
    let changed = 0;
    const consumed = emptyStats();
    const redelivery = emptyStats();
    let redelivered = 0;
    let rebuildRounds = 0;
    const samples: ReadSideAudit[] = [];

    const writers = runWorkers(WRITERS, async (w) => {
      const random = seededRandom(3210 + w);
      for (let i = 0; i < REQUESTS_PER_WRITER; i++) {
        // item-lab-01 takes half of the traffic: the hot item.
        const item = random() < 0.5 ? "item-lab-01" : LAB_ITEMS[1 + Math.floor(random() * 3)]!;
        const u = user(1 + Math.floor(random() * 60));
        const r = await (random() < 0.55 ? f.likes.like(u, item) : f.likes.unlike(u, item));
        if (r.outcome === "CHANGED") changed++;
      }
    }).finally(() => (writersDone = true));

    const parts = Array.from({ length: partitions }, (_, p) => p);
    const consumers = runWorkers(3, async () => {
      for (;;) {
        const pass = await f.consumer.pollOnce(parts, 50);
        addStats(consumed, pass);
        if (writersDone && pass.applied + pass.covered + pass.dup === 0) return;
      }
    });

    const redeliverer = (async () => {
      const random = seededRandom(3299);
      while (!writersDone) {
        const part = Math.floor(random() * partitions);
        const { rows } = await f.db.pool.query<{ last: number }>("SELECT last FROM like_seq WHERE part = $1", [part]);
        const last = rows[0]!.last;
        if (last === 0) continue;
        const from = 1 + Math.floor(random() * last);
        const events = await f.consumer.fetchRange(part, from, Math.min(last, from + 9));
        redelivered += events.length;
        addStats(redelivery, await deliver(f.consumer, events, 10));
      }
    })();

    const rebuilder = (async () => {
      while (!writersDone) {
        await f.rebuild.rebuild();
        rebuildRounds++;
        await delay(REBUILD_EVERY_MS); // pacing of the workload, not synchronisation
      }
    })();

    const sampler = (async () => {
      while (!writersDone) samples.push(await readSide(f.db.pool));
    })();

    await Promise.all([writers, consumers, redeliverer, rebuilder, sampler]);
    const drained = await f.consumer.drain();
    addStats(consumed, drained);

    const { rows } = await f.db.pool.query<{ applied: number; covered: number; events: number; unmatched: number }>(
      `SELECT count(*) FILTER (WHERE pe.how = 'APPLIED')::int AS applied,
              count(*) FILTER (WHERE pe.how = 'COVERED')::int AS covered,
              (SELECT count(*) FROM like_outbox)::int AS events,
              (SELECT count(*) FROM like_outbox o
                WHERE NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.part = o.part AND p.seq = o.seq))::int AS unmatched
         FROM processed_event pe`,
    );
    const tally = rows[0]!;
    const violations = samples.filter((s) => !readSideClean(s)).length;
    const maxLag = Math.max(0, ...samples.map((s) => s.lag));
    const maxErr = Math.max(0, ...samples.map((s) => s.maxAbsErr));
    t.diagnostic(
      `note requests=${WRITERS * REQUESTS_PER_WRITER} CHANGED=${changed} events=${tally.events} rebuild rounds=${rebuildRounds} redelivered=${redelivered}`,
    );
    t.diagnostic(
      `note consumers+redeliver: applied=${consumed.applied + redelivery.applied} covered=${consumed.covered + redelivery.covered} dup=${consumed.dup + redelivery.dup} covered rows=${tally.covered}`,
    );
    t.diagnostic(
      `note redelivery alone: applied=${redelivery.applied} covered=${redelivery.covered} dup=${redelivery.dup}`,
    );
    t.diagnostic(
      `note sampler (values vary by run): samples=${samples.length} max lag=${maxLag} max |n-truth|=${maxErr} violations=${violations}`,
    );

    // What the name claims ran, ran: rebuilds during the writes, redelivery, and rebuild
    // baselines that events arrived under (COVERED).
    assert.ok(rebuildRounds > 0, "rebuilds ran while the writers did");
    assert.ok(redelivered > 0, "events were redelivered");
    assert.equal(
      redelivery.applied + redelivery.covered + redelivery.dup,
      redelivered,
      "each redelivered event was applied, covered or a dup",
    );
    assert.ok(redelivery.dup > 0, "redeliveries of processed events were recognised as dups");
    assert.ok(tally.covered > 0, "some events were already inside a rebuild's baseline when consumed");
    assert.ok(samples.length > 0);
    assert.equal(violations, 0, "identity, item bound and unprocessed <= lag hold in every sample");
    assert.equal(changed, tally.events);
    assert.equal(tally.applied + tally.covered, tally.events, "each event exactly one APPLIED or COVERED");
    assert.equal(tally.unmatched, 0);
    assert.equal(consumed.applied + redelivery.applied, tally.applied);
    assert.equal(consumed.covered + redelivery.covered, tally.covered);
    assert.ok(writeSideClean(await writeSide(f.db.pool)));
    const end = await readSide(f.db.pool);
    assert.equal(end.lag, 0);
    assert.equal(end.countMismatchItems, 0);
    assert.ok(readSideClean(end));
  });
}
