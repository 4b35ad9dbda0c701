/**
 * Consumers over NATS JetStream, in process (docs/transport-jetstream.md): a real nats-server -js on
 * a free port with a temporary store, a real PostgreSQL database, the relay and the pull workers of
 * src/transport/. Each test has a negative control that runs the broken variant under the same
 * conditions and shows the loss or the double count the real consumer prevents.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import client from "prom-client";
import { Gate, Hooks } from "../../src/hooks.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { connectNats, durableName, eventSubject, messageId } from "../../src/transport/jetstream-setup.ts";
import { openJetStreamWorkers, openRelay, type JetStreamWorkerOptions } from "../../src/transport/jetstream-runtime.ts";
import { ackBeforeApply, trustBrokerWithoutDedup } from "./negative-controls.ts";
import { loadTransportConfig, type TransportConfig } from "../../src/transport/transport-config.ts";
import { outboxReaders, transportKinds } from "../../src/transport/transport-kinds.ts";
import { TransportMetrics } from "../../src/transport/transport-metrics.ts";
import { transportLag } from "../../src/transport/relay-watermark.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { assertConverged, assertDedupKeysComplete, setUp, totalLag, writeSome, ITEMS, USERS } from "./workload.ts";

interface Rig {
  /** Cleanups run last-registered first: workers and relay before the broker and the database. */
  defer(cleanup: () => Promise<void> | void): void;
  db: TestDatabase;
  ledger: Ledger;
  nats: TestNats;
  config: TransportConfig;
}

async function rig(t: TestContext, options: { partitions: number; env?: Record<string, string> }): Promise<Rig> {
  const db = await createTestDatabase({ partitions: options.partitions, poolSize: 12 });
  const nats = await TestNats.start();
  const cleanups: (() => Promise<void> | void)[] = [() => db.close(), () => nats.close()];
  t.after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });
  const config = loadTransportConfig({ NATS_URL: nats.url, LEDGER_GAP_CHECK_MS: "2000", ...options.env });
  return { defer: (c) => cleanups.push(c), db, ledger: await openLedger(db.pool), nats, config };
}

async function startRelay(r: Rig, options: { hooks?: Hooks } = {}) {
  const relay = await openRelay(r.ledger, r.config, { batchSize: 100, ...options });
  relay.loop.start();
  r.defer(() => relay.close());
  return relay;
}

async function startWorkers(r: Rig, options: Partial<JetStreamWorkerOptions> = {}) {
  const verdicts: Record<string, number> = {};
  const sources = { broker: 0, outbox: 0 };
  const deadLetters: string[] = [];
  const failures: unknown[] = [];
  const workers = await openJetStreamWorkers(r.ledger, r.config, {
    partitions: Array.from({ length: r.ledger.partitions }, (_, p) => p),
    batchSize: 50,
    onError: (err) => failures.push(err),
    onBatch: (_kind, _part, source, v) => {
      for (const [k, n] of Object.entries(v)) {
        verdicts[k] = (verdicts[k] ?? 0) + n;
        sources[source] += n;
      }
    },
    onDeadLetter: (kind, part, reason) => deadLetters.push(`${kind}:${part}:${reason}`),
    ...options,
  });
  for (const l of workers.loops) l.start();
  let closed = false;
  const close = async () => {
    if (!closed) await workers.close();
    closed = true;
  };
  r.defer(close);
  return { workers, verdicts, sources, deadLetters, failures, close };
}

/** Every outbox event of every kind, published again under a new id: what a relay re-publishing after the duplicate window does. */
async function publishEverythingAgain(r: Rig): Promise<number> {
  const nc = await connectNats(r.config, "test-republish");
  const js = jetstream(nc);
  const kinds = outboxReaders(r.ledger);
  let n = 0;
  for (const row of await transportLag(r.db.pool)) {
    const events = await kinds[row.kind].fetchRange(row.part, 1, row.last);
    await Promise.all(
      events.map((e) =>
        js.publish(eventSubject(r.config, row.kind, row.part), JSON.stringify(e), {
          msgID: `${messageId(row.kind, row.part, e.seq, 1)}:again`,
        }),
      ),
    );
    n += events.length;
  }
  await nc.close();
  return n;
}

test(
  "relay + JetStream workers: every kind goes through the broker, every event published twice is applied once; counts equal the facts",
  { timeout: 120_000 },
  async (t) => {
    const r = await rig(t, { partitions: 2 });
    const w = await setUp(r.ledger);
    await startRelay(r);
    const consumers = await startWorkers(r);
    let maxLag = 0;
    for (let round = 0; round < 4; round++) {
      await writeSome(r.ledger, w, 80, round + 1);
      // Bounded lag: after each round the consumers catch up, so lag never accumulates across rounds.
      await pollUntil(
        "lag back to 0",
        async () => {
          const lag = await totalLag(r.db.pool);
          maxLag = Math.max(maxLag, lag);
          return lag;
        },
        (lag) => lag === 0,
      );
    }
    // The relay records its position after JetStream acknowledged the batch, so the consumers may have applied it first.
    const lagRows = await pollUntil(
      "the relay recorded every event as published",
      () => transportLag(r.db.pool),
      (rows) => rows.every((row) => row.published === row.last),
    );
    const events = lagRows.reduce((a, row) => a + row.last, 0);
    assert.ok(maxLag <= 80 * 2, `lag stayed within two rounds of writes (max ${maxLag})`);
    for (const kind of ["likes", "relations", "comments"])
      assert.ok(
        lagRows.some((row) => row.kind === kind && row.last > 0),
        `the workload wrote ${kind} events`,
      );
    assert.equal(
      consumers.sources.outbox,
      0,
      "the broker delivered everything: nothing was gap-filled from the outbox",
    );
    // relation_event feeds two consumer kinds (the projector and the feed), each with its own durable;
    // the setup's post events were applied before the relay started, so it never published them.
    const copies = lagRows.reduce((a, row) => a + row.last * (row.kind === "relations" ? 2 : 1), 0);
    const deliveries = copies - w.posts.length;
    assert.equal(consumers.sources.broker, deliveries, "each event delivered once to each of its consumers so far");
    await assertConverged(r.ledger);

    const republished = await publishEverythingAgain(r);
    assert.equal(republished, events);
    await pollUntil(
      "second copies consumed",
      async () => consumers.verdicts.dup ?? 0,
      (dup) => dup >= copies,
    );
    assert.equal(consumers.verdicts.dup, copies, "every copy published again was a duplicate");
    await assertConverged(r.ledger);
    await assertDedupKeysComplete(r.db.pool);
    assert.deepEqual(consumers.deadLetters, []);
    t.diagnostic(`note events=${events} maxLag=${maxLag} deliveries=${consumers.sources.broker}`);
  },
);

test(
  "negative control: a consumer that trusts the broker (no outbox check, no dedup) counts every re-published like twice",
  { timeout: 120_000 },
  async (t) => {
    const r = await rig(t, { partitions: 1 });
    await setUp(r.ledger);
    const rand = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
    for (const i of rand) await r.ledger.likes.like(USERS[i]!, ITEMS[i % ITEMS.length]!);
    await r.ledger.likes.unlike(USERS[0]!, ITEMS[0]!);
    await startRelay(r);
    const consumers = await startWorkers(r, { kinds: ["likes"], deliver: trustBrokerWithoutDedup, gapFill: false });
    await pollUntil(
      "first copies consumed",
      async () => consumers.verdicts.applied ?? 0,
      (n) => n >= 11,
    );
    await publishEverythingAgain(r);
    await pollUntil(
      "second copies consumed",
      async () => consumers.verdicts.applied ?? 0,
      (n) => n >= 22,
    );
    const { rows } = await r.db.pool.query<{ item_id: string; counted: string; facts: string }>(
      `SELECT i.item_id, coalesce((SELECT sum(n) FROM like_count c WHERE c.item_id = i.item_id), 0) AS counted,
            (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked) AS facts
       FROM item i WHERE i.item_id = ANY ($1) ORDER BY 1`,
      [ITEMS],
    );
    for (const row of rows)
      assert.equal(Number(row.counted), 2 * Number(row.facts), `${row.item_id}: every delta counted twice`);
    assert.ok(rows.some((row) => Number(row.facts) > 0));
  },
);

test(
  "a redelivery after the ack timeout (apply committed, ack not yet sent) is a duplicate; the late ack is harmless",
  { timeout: 120_000 },
  async (t) => {
    const r = await rig(t, { partitions: 1, env: { LEDGER_NATS_ACK_WAIT_MS: "300" } });
    await setUp(r.ledger);
    for (let i = 0; i < 6; i++) await r.ledger.likes.like(USERS[i]!, ITEMS[i % ITEMS.length]!);
    await startRelay(r);
    // All six in the stream before A subscribes, so that A's first pull hands them over as one batch.
    await pollUntil(
      "the relay published 1..6",
      async () => (await transportLag(r.db.pool)).find((l) => l.kind === "likes")?.published ?? 0,
      (n) => n === 6,
    );
    const hooksA = new Hooks();
    const gate = new Gate("transport.afterApply");
    hooksA.on("transport.afterApply", gate.handler);
    const a = await startWorkers(r, { kinds: ["likes"], hooks: hooksA, gapFill: false });
    r.defer(() => gate.release()); // before A's close, if an assertion fails while A is parked
    const parked = await gate.waitArrived();
    assert.deepEqual(parked.seqs, [1, 2, 3, 4, 5, 6], "worker A applied the batch and holds it unacknowledged");
    const jsm = await jetstreamManager(a.workers.nc);
    const durable = durableName(r.config, "likes", 0);
    const held = await jsm.consumers.info(r.config.stream, durable);
    assert.deepEqual(
      [held.delivered.stream_seq, held.ack_floor.stream_seq, held.num_ack_pending],
      [6, 0, 6],
      "the broker delivered 1..6 and has no ack for any",
    );
    // Worker B pulls from the same durable consumer: it gets the batch again once ack_wait (300 ms) has passed.
    const b = await startWorkers(r, { kinds: ["likes"], gapFill: false });
    await pollUntil(
      "redelivered to B",
      async () => b.verdicts.dup ?? 0,
      (n) => n >= 6,
    );
    assert.equal(b.verdicts.applied ?? 0, 0, "B applied nothing: every redelivered event is at or below the watermark");
    gate.release();
    await pollUntil(
      "A's batch returned",
      async () => a.verdicts.applied ?? 0,
      (n) => n === 6,
    );
    // The broker's own count of deliveries: every delivery after the first of each of the 6
    // messages is a redelivery, and each one reached a worker (A's buffer or B) as a duplicate.
    // (num_redelivered counts only redelivered messages still unacknowledged, so it is 0 here.)
    const redeliveries = (i: { delivered: { consumer_seq: number; stream_seq: number } }) =>
      i.delivered.consumer_seq - i.delivered.stream_seq;
    const info = await pollUntil(
      "everything acknowledged and every redelivery handled",
      () => jsm.consumers.info(r.config.stream, durable),
      (i) =>
        i.num_ack_pending === 0 &&
        i.num_pending === 0 &&
        redeliveries(i) === (a.verdicts.dup ?? 0) + (b.verdicts.dup ?? 0),
    );
    assert.deepEqual([info.delivered.stream_seq, info.ack_floor.stream_seq], [6, 6]);
    assert.ok(
      redeliveries(info) >= 6,
      `the broker redelivered the whole batch at least once (${redeliveries(info)} redeliveries)`,
    );
    await assertConverged(r.ledger);
    t.diagnostic(
      `note A applied=${a.verdicts.applied} dup=${a.verdicts.dup ?? 0}; B dup=${b.verdicts.dup}; the broker counts ${redeliveries(info)} redeliveries`,
    );
  },
);

test(
  "after a quiet period a new event comes from the broker, never from the gap filler: nothing is filled while the relay has not published it, and ledger_transport_gap_filled_events_total stays 0",
  { timeout: 120_000 },
  async (t) => {
    // A gap check every 50 ms and a pass every 100 ms at most, so checks run many times while the relay is held.
    const r = await rig(t, { partitions: 1, env: { LEDGER_GAP_CHECK_MS: "50" } });
    await setUp(r.ledger);
    await r.ledger.likes.like(USERS[0]!, ITEMS[0]!);
    const registry = new client.Registry();
    const metrics = new TransportMetrics(registry, r.db.pool);
    const workerHooks = new Hooks();
    let checks = 0;
    workerHooks.on("transport.afterGapCheck", () => {
      checks++;
    });
    const relayHooks = new Hooks();
    await startRelay(r, { hooks: relayHooks });
    const c = await startWorkers(r, { kinds: ["likes"], hooks: workerHooks, metrics, fetchExpiresMs: 100 });
    await pollUntil(
      "seq 1 applied from the broker",
      () => totalLag(r.db.pool),
      (lag) => lag === 0,
    );
    // The quiet period: gap checks with the watermark standing still at 1 and nothing new in the outbox.
    const quiet = checks;
    await pollUntil(
      "two gap checks in the quiet period",
      async () => checks,
      (n) => n >= quiet + 2,
    );

    // The next event commits; the relay has read it and parks before publishing it.
    const beforePublish = new Gate("relay.beforePublish");
    relayHooks.on("relay.beforePublish", beforePublish.handler);
    r.defer(() => beforePublish.release());
    await r.ledger.likes.like(USERS[1]!, ITEMS[0]!);
    assert.deepEqual(
      await beforePublish.waitArrived().then((ctx) => [ctx.from, ctx.upto]),
      [2, 2],
      "the relay holds seq 2 unpublished",
    );
    // Every check that started after the commit saw seq 2 in the outbox above a watermark that had not moved.
    const committed = checks;
    await pollUntil(
      "three gap checks with seq 2 committed and unpublished",
      async () => checks,
      (n) => n >= committed + 3,
    );
    assert.equal(
      c.sources.outbox,
      0,
      "the gap filler did not take seq 2 from the outbox: the relay had not published it",
    );
    assert.equal(await totalLag(r.db.pool), 1, "seq 2 is waiting for the broker");

    // The relay publishes; JetStream has seq 2 while the relay's progress row still says 1.
    const afterPublish = new Gate("relay.afterPublish");
    relayHooks.on("relay.afterPublish", afterPublish.handler);
    r.defer(() => afterPublish.release());
    beforePublish.release();
    await afterPublish.waitArrived();
    await pollUntil(
      "seq 2 applied from the broker",
      () => totalLag(r.db.pool),
      (lag) => lag === 0,
    );
    afterPublish.release();
    await pollUntil(
      "the relay recorded seq 2",
      async () => (await transportLag(r.db.pool)).find((row) => row.kind === "likes")!.published,
      (p) => p === 2,
    );
    const seen = checks;
    await pollUntil(
      "two more gap checks",
      async () => checks,
      (n) => n >= seen + 2,
    );
    assert.deepEqual(c.sources, { broker: 2, outbox: 0 }, "both events came from the broker, once each");
    assert.match(
      await registry.getSingleMetricAsString("ledger_transport_gap_filled_events_total"),
      /^ledger_transport_gap_filled_events_total\{kind="likes"\} 0$/m,
    );
    await assertConverged(r.ledger);
  },
);

test(
  "an apply that fails is retried by redelivery (acked only after commit); a consumer that acks first loses the events until the gap filler takes them from the outbox",
  { timeout: 120_000 },
  async (t) => {
    for (const variant of ["ack-after-commit", "ack-before-apply"] as const) {
      const r = await rig(t, {
        partitions: 1,
        env: { LEDGER_NATS_ACK_WAIT_MS: "300", LEDGER_NATS_STREAM: variant === "ack-after-commit" ? "GOOD" : "CTRL" },
      });
      await setUp(r.ledger);
      for (let i = 0; i < 5; i++) await r.ledger.likes.like(USERS[i]!, ITEMS[0]!);
      // The first two applies that hold seq 1 fail (a crash between receipt and commit); later ones run.
      const hooks = new Hooks();
      let failed = 0;
      hooks.on("transport.beforeApply", (ctx) => {
        if (failed < 2 && (ctx.seqs as number[]).includes(1)) {
          failed++;
          throw new Error("crash before the apply committed");
        }
      });
      const c = await startWorkers(r, {
        kinds: ["likes"],
        hooks,
        gapFill: false,
        ...(variant === "ack-before-apply" ? { deliver: ackBeforeApply } : {}),
      });
      await startRelay(r);
      await pollUntil(
        "the failing apply happened",
        async () => failed,
        (n) => n >= 1,
      );
      // Events written after the failure are delivered and applied in both variants.
      for (let i = 5; i < 8; i++) await r.ledger.likes.like(USERS[i]!, ITEMS[0]!);
      await pollUntil(
        "later events processed",
        async () => (await r.db.pool.query("SELECT 1 FROM processed_event WHERE seq > 5")).rowCount ?? 0,
        (n) => n === 3,
      );
      const lag = () => totalLag(r.db.pool);
      if (variant === "ack-after-commit") {
        await pollUntil("the nak'd event redelivered and applied", lag, (n) => n === 0);
        assert.equal(failed, 2, "the batch failed, then seq 1 alone failed and was nak'd");
        assert.equal(c.sources.outbox, 0, "redelivered by the broker, not gap-filled");
        await assertConverged(r.ledger);
        continue;
      }
      // Acked before applying: the broker never redelivers seq 1..5, the watermark stays below them.
      const jsm = await jetstreamManager(c.workers.nc);
      const info = await pollUntil(
        "broker has nothing more to deliver",
        () => jsm.consumers.info(r.config.stream, durableName(r.config, "likes", 0)),
        (i) => i.num_ack_pending === 0 && i.num_pending === 0,
      );
      assert.equal(info.num_ack_pending, 0);
      assert.equal(await lag(), 8, "the watermark is stuck at 0: seq 1 is lost for the broker");
      // Which of 1..5 went down with seq 1 depends on how the pulls split them into batches (every
      // batch that held seq 1 failed after its ack); seq 1 itself is always among them.
      const { rows } = await r.db.pool.query<{ n: string }>(
        "SELECT coalesce(sum(n), 0) AS n FROM like_count WHERE item_id = $1",
        [ITEMS[0]],
      );
      const counted = Number(rows[0]!.n);
      assert.ok(
        counted >= 3 && counted < 8,
        `acked and lost: ${8 - counted} of the 8 likes are not counted (the 3 later ones are)`,
      );
      assert.equal(
        (await r.db.pool.query("SELECT 1 FROM processed_event WHERE seq = 1")).rowCount,
        0,
        "seq 1 was never applied",
      );
      // The repair: a worker with the gap filler notices the watermark standing still and applies the lost events from the outbox.
      await c.close();
      const repair = await startWorkers(r, { kinds: ["likes"] });
      await pollUntil("gap filled", lag, (n) => n === 0);
      assert.equal(repair.sources.outbox, 8 - counted, "exactly the lost events came from the outbox");
      await assertConverged(r.ledger);
    }
  },
);

test(
  "a message dead-lettered a second time (redelivered before its term landed, same stream seq) is one dead letter: stored once, counted once",
  { timeout: 120_000 },
  async (t) => {
    const r = await rig(t, { partitions: 1 });
    const deadLetters: string[] = [];
    // The workers' loops never start: the test hands the consumer one message itself.
    const workers = await openJetStreamWorkers(r.ledger, r.config, {
      partitions: [0],
      batchSize: 10,
      kinds: ["likes"],
      onDeadLetter: (kind, part, reason) => deadLetters.push(`${kind}:${part}:${reason}`),
    });
    r.defer(() => workers.close());
    const js = jetstream(workers.nc);
    await js.publish(eventSubject(r.config, "likes", 0), "not json", { msgID: "garbage" });
    const m = await (
      await js.consumers.get(r.config.stream, durableName(r.config, "likes", 0))
    ).next({ expires: 5_000 });
    assert.ok(m, "the message was delivered");
    const c = workers.consumers[0]!;
    await c.deadLetter(m, "malformed", new Error("not JSON"));
    await c.deadLetter(m, "malformed", new Error("not JSON"));
    assert.deepEqual(
      deadLetters,
      ["likes:0:malformed"],
      "counted once (ledger_transport_dead_letters_total and the log line follow this callback)",
    );
    const dlq = await (await jetstreamManager(workers.nc)).streams.info(`${r.config.stream}_DLQ`);
    assert.equal(dlq.state.messages, 1, "the dead-letter stream dropped the second copy (same id)");
  },
);

test(
  "poison: a forged copy and a malformed message go to the dead-letter stream at once, a message failing every delivery after max_deliver; none blocks its partition",
  { timeout: 120_000 },
  async (t) => {
    // The gap check (3 s) is slower than three deliveries (200 ms ack wait, then 200 and 400 ms nak delays).
    const r = await rig(t, {
      partitions: 1,
      env: { LEDGER_NATS_ACK_WAIT_MS: "200", LEDGER_NATS_MAX_DELIVER: "3", LEDGER_GAP_CHECK_MS: "3000" },
    });
    await setUp(r.ledger);
    for (let i = 0; i < 4; i++) await r.ledger.likes.like(USERS[i]!, ITEMS[1]!);
    const hooks = new Hooks();
    // Seq 3 fails whenever the broker delivers it (an apply that breaks on this event every time).
    let brokerAttempts = 0;
    hooks.on("transport.beforeApply", (ctx) => {
      if ((ctx.seqs as number[]).includes(3)) {
        brokerAttempts++;
        throw new Error("this event breaks the apply");
      }
    });
    const c = await startWorkers(r, { kinds: ["likes"], hooks });
    const nc = await connectNats(r.config, "test-forger");
    r.defer(() => nc.close());
    const js = jetstream(nc);
    const subject = eventSubject(r.config, "likes", 0);
    // Before the relay: a copy of seq 1 with another item (not what the outbox holds) and a non-JSON message.
    await js.publish(
      subject,
      JSON.stringify({ part: 0, seq: 1, userId: USERS[0], itemId: ITEMS[2], delta: 1, version: 1 }),
      { msgID: "forged" },
    );
    await js.publish(subject, "not json", { msgID: "garbage" });
    await startRelay(r);
    await pollUntil(
      "three dead letters",
      async () => c.deadLetters.length,
      (n) => n === 3,
    );
    assert.deepEqual([...c.deadLetters].sort(), ["likes:0:attempts", "likes:0:malformed", "likes:0:verification"]);
    assert.equal(c.sources.outbox, 0, "dead-lettered before the gap filler ran");
    assert.equal(await totalLag(r.db.pool), 2, "the partition waits at seq 3 (watermark 2 of 4): held, not silently");
    await pollUntil(
      "everything applied",
      () => totalLag(r.db.pool),
      (n) => n === 0,
    );
    assert.ok(brokerAttempts >= 3, "seq 3 failed on every delivery");
    assert.equal(c.sources.outbox, 1, "the gap filler applied seq 3 from the outbox");
    const jsm = await jetstreamManager(nc);
    const dlq = await jsm.streams.info(`${r.config.stream}_DLQ`);
    assert.equal(dlq.state.messages, 3, "the dead-letter stream holds the three messages");
    const reasons: string[] = [];
    for (let seq = 1; seq <= 3; seq++) {
      const stored = await jsm.streams.getMessage(`${r.config.stream}_DLQ`, { seq });
      reasons.push(`${stored?.header.get("Ledger-Dead-Reason")}@${stored?.header.get("Ledger-Delivery-Count")}`);
    }
    assert.ok(
      reasons.includes("attempts@3"),
      `the attempts dead letter was on its third delivery: ${reasons.join(", ")}`,
    );
    await assertConverged(r.ledger);
  },
);

test(
  "a copy of an event of another timeline that the outbox does not hold under it (a promotion lost it) is dead-lettered as lost, even when every other field matches the row now at its position",
  { timeout: 120_000 },
  async (t) => {
    const r = await rig(t, { partitions: 1 });
    await setUp(r.ledger);
    for (let i = 0; i < 3; i++) await r.ledger.likes.like(USERS[i]!, ITEMS[1]!);
    const c = await startWorkers(r, { kinds: ["likes"], gapFill: false });
    const nc = await connectNats(r.config, "test-old-timeline");
    r.defer(() => nc.close());
    const js = jetstream(nc);
    const subject = eventSubject(r.config, "likes", 0);
    const rows = await transportKinds(r.ledger).likes.fetchRange(0, 1, 3);
    // Timeline 7 is not the database's (1): seq 2 as the lost event had it (the same fields as the row now
    // there, which verification alone would accept), and seq 5, a position the outbox has not reached.
    await js.publish(subject, JSON.stringify({ ...rows[1]!, timeline: 7 }), { msgID: "lost-2" });
    await js.publish(subject, JSON.stringify({ ...rows[2]!, seq: 5, timeline: 7 }), { msgID: "lost-5" });
    await startRelay(r);
    await pollUntil(
      "applied and dead-lettered",
      async () => [c.verdicts.applied ?? 0, c.deadLetters.length],
      ([applied, dead]) => applied === 3 && dead === 2,
    );
    assert.deepEqual(c.deadLetters, ["likes:0:lost", "likes:0:lost"]);
    const jsm = await jetstreamManager(nc);
    const dlq = await jsm.streams.getMessage(`${r.config.stream}_DLQ`, { seq: 1 });
    assert.match(dlq!.header.get("Ledger-Error"), /event 0:2 of timeline 7 is not in the outbox .*holds another event/);
    await assertConverged(r.ledger);
  },
);
