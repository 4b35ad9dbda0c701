/**
 * A PostgreSQL failover on real components (docs/failover.md): a primary and a streaming standby
 * made from the embedded binaries (support/standby.ts), the ledger reached through a TCP forwarder
 * (support/tcp-proxy.ts: the address a client keeps while the server behind it changes), the
 * JetStream relay and consumers on a nats-server, the Redis count layer on a redis-server and the
 * webhook delivery worker with a real receiver, all running in loops under like/unlike load. The
 * primary's processes are killed with -9, the standby promoted, the forwarder pointed at it; the load
 * goes on. With asynchronous replication the loss is made certain, not raced: the standby's WAL
 * receiver is stopped (primary_conninfo emptied) before the tail is written, and the tail is carried
 * downstream (published, applied, delivered, fed) before the kill.
 */
import { after, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { rm } from "node:fs/promises";
import path from "node:path";
import { setTimeout as pause } from "node:timers/promises";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import pg from "pg";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { openCountLayer, type CountLayer } from "../../src/cache/count-layer.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { JetStreamPartitionConsumer } from "../../src/transport/jetstream-consumer.ts";
import { closeNats, connectNats, ensureConsumer, ensureStreams } from "../../src/transport/jetstream-setup.ts";
import { OutboxRelay, type RelayOptions } from "../../src/transport/outbox-relay.ts";
import type { TransportConfig } from "../../src/transport/transport-config.ts";
import { outboxReaders, transportKinds } from "../../src/transport/transport-kinds.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { EndpointRegistry } from "../../src/webhooks/endpoint-registry.ts";
import type { DeliveredEvent } from "../../src/webhooks/lost-deliveries.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";
import { TestRedis } from "../../support/redis-server.ts";
import { TestStandby } from "../../support/standby.ts";
import { TcpProxy } from "../../support/tcp-proxy.ts";
import { TestReceiver } from "../webhooks/receiver.ts";
import { feederWithoutRealign, PositionOnlyIdDelivery, positionOnlyMessageId } from "./negative-controls.ts";

const PARTITIONS = 2;
const WRITERS = 4;
const ITEMS = 6;
/**
 * An item only the tail writes to (one like, by a user of its own). The load after the promotion
 * repeats the tail's pattern (the same items in the same order, at the positions the tail had), so a
 * layer that kept the tail and skipped those positions can end up with the right totals by
 * coincidence; this item's count cannot: nothing after the promotion touches it.
 */
const TAIL_ITEM = "item-tail-only";
const TAIL_USER = "tail-only";
const ALL_ITEMS = [...Array.from({ length: ITEMS }, (_, i) => `item${i}`), TAIL_ITEM];

/** One acknowledged like or unlike: its pair, the fact's version it made, and when. */
interface Ack {
  user: string;
  item: string;
  version: number;
  part: number;
  seq: number;
  phase: "before-cut" | "tail" | "after-promotion";
}

interface Rig {
  primary: EmbeddedCluster;
  standby: TestStandby;
  proxy: TcpProxy;
  pool: Pool;
  ledger: Ledger;
  nats: TestNats;
  nc: NatsConnection;
  jsm: JetStreamManager;
  config: TransportConfig;
  counts: CountLayer;
  delivery: WebhookDelivery;
  receiver: TestReceiver;
  acks: Ack[];
  /** Writes whose answer never came (the server died under them): their outcome is unknown. */
  unanswered: number;
  deadLetters: { reason: string; error: unknown }[];
  lostReported: DeliveredEvent[];
  phase: Ack["phase"];
  load: Loops;
  workers: Loops;
}

/** Loops that run until stopped; an idle or failing step pauses a few ms (pacing, not synchronisation). */
class Loops {
  private running = true;
  private readonly done: Promise<void>[] = [];
  errors = 0;

  add(step: () => Promise<number>, idleMs = 5): void {
    this.done.push(
      (async () => {
        while (this.running) {
          try {
            if ((await step()) === 0) await pause(idleMs);
          } catch {
            this.errors++;
            await pause(20);
          }
        }
      })(),
    );
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.done);
  }
}

async function superuser<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** A migrated cluster, stopped cleanly, made once: each run's primary starts on a copy (cp -a keeps the server's ownership). */
let template: Promise<string> | undefined;
after(async () => {
  if (template) await rm(path.dirname(await template), { recursive: true, force: true });
});

function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const dataDir = path.join(await clusterTempDir("ledger-failover-template-"), "data");
    const cluster = await EmbeddedCluster.start({ dataDir });
    const setup = createPool({ connectionString: cluster.connectionString(), max: 2 });
    await migrate(setup);
    await initLedger(setup, { partitions: PARTITIONS });
    await setup.end();
    await cluster.stop();
    return dataDir;
  })();
  return template;
}

async function startRig(
  t: TestContext,
  options: { synchronous: boolean; messageId?: RelayOptions["messageId"]; positionOnlyWebhookIds?: boolean },
): Promise<Rig> {
  const root = await clusterTempDir("ledger-failover-");
  execFileSync("cp", ["-a", await migratedTemplate(), path.join(root, "primary")]);
  const primary = await EmbeddedCluster.start({ dataDir: path.join(root, "primary") });
  const standby = await TestStandby.fromPrimary(primary, { dataDir: path.join(root, "standby") });
  if (options.synchronous) {
    await superuser(primary.connectionString(), `ALTER SYSTEM SET synchronous_standby_names = '${standby.slot}'`);
    await superuser(primary.connectionString(), "SELECT pg_reload_conf()");
    await pollUntil(
      "the standby is synchronous",
      () => superuser<{ s: string }>(primary.connectionString(), "SELECT sync_state AS s FROM pg_stat_replication"),
      (rows) => rows.some((r) => r.s === "sync"),
      30_000,
    );
  }
  const proxy = await TcpProxy.start(new URL(primary.connectionString()).port as unknown as number);
  const pool = createPool({
    connectionString: `postgres://postgres:postgres@127.0.0.1:${proxy.port}/postgres`,
    max: 16,
    connectionTimeoutMs: 2_000,
  });
  pool.on("error", () => undefined);
  const ledger = await openLedger(pool);
  const nats = await TestNats.start();
  const redis = await TestRedis.start();
  const receiver = await TestReceiver.start();
  const config: TransportConfig = {
    servers: [nats.url],
    stream: "FAILOVER",
    ackWaitMs: 2_000,
    maxDeliver: 5,
    duplicateWindowSeconds: 120,
    maxAgeSeconds: 3_600,
    gapCheckMs: 1_000,
    pingIntervalMs: 10_000,
    maxPingsOut: 2,
  };
  const nc = await connectNats(config, "failover-test");
  const jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, config);
  const counts = await openCountLayer(pool, { redisUrl: redis.url, reconcileIntervalMs: 3_600_000 });
  const registry = new EndpointRegistry(pool, { allowPrivate: true, failingAfter: 3 });
  const { secret } = await registry.create({ url: receiver.url, events: ["*"] });
  receiver.secrets.push(secret);
  for (const item of ALL_ITEMS) await ledger.likes.createItem(item);
  // The tail-only item's counter lives in Redis from this read on, as the load's items' do from theirs.
  await counts.reader.read(LIKE_COUNTS, TAIL_ITEM, { allowedLag: 1_000_000 });

  const rig: Rig = {
    primary,
    standby,
    proxy,
    pool,
    ledger,
    nats,
    nc,
    jsm,
    config,
    counts,
    delivery: undefined as unknown as WebhookDelivery,
    receiver,
    acks: [],
    unanswered: 0,
    deadLetters: [],
    lostReported: [],
    phase: "before-cut",
    load: new Loops(),
    workers: new Loops(),
  };
  rig.delivery = new (options.positionOnlyWebhookIds ? PositionOnlyIdDelivery : WebhookDelivery)(pool, {
    retryBaseMs: 1,
    maxBackoffMs: 20,
    limits: { allowPrivate: true, responseTimeoutMs: 5_000, connectTimeoutMs: 2_000 },
    onLost: (lost) => rig.lostReported.push(...lost),
  });
  const kinds = transportKinds(ledger);
  const relay = new OutboxRelay(pool, outboxReaders(ledger), jetstream(nc), config, {
    kinds: ["likes"],
    batchSize: 200,
    ...(options.messageId ? { messageId: options.messageId } : {}),
  });
  await relay.init();
  const consumers: JetStreamPartitionConsumer[] = [];
  for (let part = 0; part < PARTITIONS; part++) {
    await ensureConsumer(jsm, config, "likes", part);
    consumers.push(
      new JetStreamPartitionConsumer(pool, kinds.likes, jetstream(nc), config, part, {
        batchSize: 100,
        fetchExpiresMs: 200,
        onDeadLetter: (_k, _p, reason, error) => rig.deadLetters.push({ reason, error }),
      }),
    );
  }
  rig.workers.add(() => relay.passOnce());
  for (const c of consumers) rig.workers.add(() => c.pass());
  rig.workers.add(() => counts.feed());
  rig.workers.add(() => rig.delivery.pass());
  rig.workers.add(() => rig.delivery.pass());

  t.after(async () => {
    await rig.load.stop();
    await rig.workers.stop();
    for (const c of consumers) await c.stop();
    relay.close();
    await counts.close();
    await closeNats(nc);
    await pool.end().catch(() => undefined);
    await proxy.close();
    await receiver.close();
    await redis.kill();
    await nats.close();
    await standby.stop();
    await primary.stop().catch(() => undefined);
    await rm(root, { recursive: true, force: true });
  });
  return rig;
}

/** WRITERS writers, each toggling likes of its own users on the items and reading the item's count, ~50 a second each. */
function startLoad(rig: Rig, round: number): void {
  rig.load = new Loops();
  for (let w = 0; w < WRITERS; w++) {
    let n = 0;
    rig.load.add(async () => {
      const user = `u${round}_${w}_${n % 5}`;
      const item = `item${n % ITEMS}`;
      n++;
      const phase = rig.phase;
      const liked = (await rig.ledger.likes.hasLiked(user, item)).liked;
      let answer;
      try {
        answer = liked ? await rig.ledger.likes.unlike(user, item) : await rig.ledger.likes.like(user, item);
      } catch (err) {
        rig.unanswered++;
        throw err;
      }
      if (answer.seq > 0 && phase === rig.phase)
        rig.acks.push({ user, item, version: answer.version, part: answer.part, seq: answer.seq, phase });
      // Reads as the API's do: counters live in Redis from their first read, and the feeder increments them.
      await rig.counts.reader.read(LIKE_COUNTS, item, { allowedLag: 1_000_000 });
      await pause(20);
      return 1;
    });
  }
}

/** Until every view has reached the outbox's end: relay, JetStream consumer, Redis feeder, webhook cursors. */
async function drained(rig: Rig): Promise<void> {
  await pollUntil(
    "every consumer at the outbox's end",
    async () => {
      const { rows } = await rig.pool.query<{ behind: number }>(
        `SELECT (SELECT count(*) FROM like_seq s JOIN relay_watermark r ON r.kind = 'likes' AND r.part = s.part WHERE r.published_upto < s.last)
              + (SELECT count(*) FROM like_seq s JOIN counter_watermark w USING (part) WHERE w.applied_upto < s.last)
              + (SELECT count(*) FROM like_seq s JOIN webhook_cursor c ON c.source = 'likes' AND c.part = s.part WHERE c.delivered_upto < s.last) AS behind`,
      );
      const fed = await rig.counts.redis!.hGetAll("sl:v2:feed:likes");
      const { rows: last } = await rig.pool.query<{ part: number; last: string }>("SELECT part, last FROM like_seq");
      const feederBehind = last.filter((r) => Number(fed[String(r.part)] ?? -1) < Number(r.last)).length;
      return Number(rows[0]!.behind) + feederBehind;
    },
    (behind) => behind === 0,
    60_000,
    20,
  );
}

async function acksReach(rig: Rig, phase: Ack["phase"], n: number): Promise<void> {
  await pollUntil(
    `${n} acknowledged writes in phase ${phase}`,
    async () => rig.acks.filter((a) => a.phase === phase).length,
    (c) => c >= n,
    60_000,
  );
}

/** kill -9 of the postmaster and every server process of it (as a dead host: nothing flushes, nothing says goodbye). */
function killPrimary(rig: Rig): void {
  const pid = rig.primary.pid!;
  const children = execFileSync("ps", ["-o", "pid=", "--ppid", String(pid)])
    .toString()
    .split("\n")
    .map((s) => Number(s.trim()))
    .filter((n) => n > 0);
  process.kill(pid, "SIGKILL");
  for (const child of children) {
    try {
      process.kill(child, "SIGKILL");
    } catch {
      // gone already
    }
  }
}

async function failOver(rig: Rig): Promise<void> {
  killPrimary(rig);
  await rig.standby.promote();
  rig.proxy.retarget(rig.standby.port);
  rig.phase = "after-promotion";
}

/** The new primary's truth against every view outside it. */
async function assertViewsEqualTruth(rig: Rig): Promise<void> {
  const audit = await fullAudit(rig.ledger);
  assert.equal(audit.clean, true, `audit: ${JSON.stringify(audit)}`);
  assert.deepEqual(await redisDrift(rig), [], "every count read from Redis equals the facts");
}

/** Items whose count read from Redis differs from the facts. */
async function redisDrift(rig: Rig): Promise<string[]> {
  const drifted: string[] = [];
  for (const item of ALL_ITEMS) {
    const truth = (
      await rig.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact WHERE item_id = $1 AND liked", [
        item,
      ])
    ).rows[0]!.n;
    const answer = await rig.counts.reader.read(LIKE_COUNTS, item, { allowedLag: 0 });
    assert.equal(answer.source, "cache", `${item} read from Redis`);
    if (answer.count !== truth) drifted.push(`${item}: Redis ${answer.count}, facts ${truth}`);
  }
  return drifted;
}

/** Every event of the outbox, as the webhook receiver must have it: its webhook-id. */
async function outboxWebhookIds(rig: Rig): Promise<Set<string>> {
  const { rows } = await rig.pool.query<{ part: number; seq: string; timeline: number }>(
    "SELECT part, seq, timeline FROM like_outbox",
  );
  return new Set(
    rows.map((r) =>
      r.timeline === 1 ? `evt_likes_${r.part}_${r.seq}` : `evt_likes_${r.part}_${r.seq}_t${r.timeline}`,
    ),
  );
}

/**
 * The events of timeline 2 a receiver that de-duplicates by webhook-id (Standard Webhooks) never
 * processes: it keeps the first body of each id, and an event is processed when its body is kept.
 */
async function droppedByReceiverDedup(rig: Rig): Promise<string[]> {
  const kept = new Map<string, string>();
  for (const d of rig.receiver.deliveries) if (d.status === 200 && !kept.has(d.id)) kept.set(d.id, d.body);
  const processed = new Set(
    [...kept.values()].map((body) => {
      const data = (JSON.parse(body) as { data: { partition: number; seq: number; userId: string; version: number } })
        .data;
      return `${data.partition}:${data.seq}:${data.userId}:${data.version}`;
    }),
  );
  const { rows } = await rig.pool.query<{ k: string }>(
    "SELECT part || ':' || seq || ':' || user_id || ':' || version AS k FROM like_outbox WHERE timeline = 2",
  );
  return rows.map((r) => r.k).filter((k) => !processed.has(k));
}

/** Every likes message JetStream holds, as "part:seq:timeline:user:item:version". */
async function streamEvents(rig: Rig): Promise<Set<string>> {
  const info = await rig.jsm.streams.info(rig.config.stream);
  const out = new Set<string>();
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await rig.jsm.streams.getMessage(rig.config.stream, { seq });
    if (!m) continue;
    const e = m.json<{
      part: number;
      seq: number;
      timeline: number;
      userId: string;
      itemId: string;
      version: number;
    }>();
    out.add(`${e.part}:${e.seq}:${e.timeline}:${e.userId}:${e.itemId}:${e.version}`);
  }
  return out;
}

async function outboxEvents(rig: Rig, where: string): Promise<Set<string>> {
  const { rows } = await rig.pool.query<{ k: string }>(
    `SELECT part || ':' || seq || ':' || timeline || ':' || user_id || ':' || item_id || ':' || version AS k FROM like_outbox WHERE ${where}`,
  );
  return new Set(rows.map((r) => r.k));
}

async function hasOutboxRow(rig: Rig, a: Ack, timeline: number): Promise<boolean> {
  const { rows } = await rig.pool.query(
    "SELECT 1 FROM like_outbox WHERE user_id = $1 AND item_id = $2 AND version = $3 AND timeline = $4",
    [a.user, a.item, a.version, timeline],
  );
  return rows.length > 0;
}

/**
 * Asynchronous replication: the tail written after the standby stopped receiving is lost, and it is
 * exactly what is missing; what downstream had taken of it is realigned or reported.
 */
async function asyncFailover(
  t: TestContext,
  controls: { messageId?: RelayOptions["messageId"]; positionOnlyWebhookIds?: boolean } = {},
) {
  const started = Date.now();
  const marks: string[] = [];
  const mark = (what: string) => marks.push(`${what} ${((Date.now() - started) / 1000).toFixed(1)}s`);
  const rig = await startRig(t, { synchronous: false, ...controls });
  mark("rig");
  startLoad(rig, 0);
  await acksReach(rig, "before-cut", 60);
  await rig.load.stop();
  await drained(rig);
  await rig.standby.catchUp();
  mark("drained, standby caught up");
  // The standby stops receiving WAL: everything committed from here on exists on the primary only.
  await superuser(rig.standby.connectionString(), "ALTER SYSTEM SET primary_conninfo = ''");
  await superuser(rig.standby.connectionString(), "SELECT pg_reload_conf()");
  await pollUntil(
    "the standby's WAL receiver stopped",
    () =>
      superuser<{ n: number }>(rig.standby.connectionString(), "SELECT count(*)::int AS n FROM pg_stat_wal_receiver"),
    (rows) => rows[0]!.n === 0,
    30_000,
  );
  mark("cut");
  const fork = await rig.pool.query<{ part: number; last: string }>("SELECT part, last FROM like_seq ORDER BY part");
  rig.phase = "tail";
  startLoad(rig, 1);
  await acksReach(rig, "tail", 40);
  await rig.load.stop();
  const only = await rig.ledger.likes.like(TAIL_USER, TAIL_ITEM);
  rig.acks.push({
    user: TAIL_USER,
    item: TAIL_ITEM,
    version: only.version,
    part: only.part,
    seq: only.seq,
    phase: "tail",
  });
  // The tail goes all the way downstream: published, applied, delivered, counted in Redis.
  await drained(rig);
  const tailIds = new Set(rig.acks.filter((a) => a.phase === "tail").map((a) => `evt_likes_${a.part}_${a.seq}`));
  // Load again (other users, the same partitions: the new primary reuses the tail's positions), then the failover under it.
  startLoad(rig, 2);
  mark("tail drained");
  await failOver(rig);
  mark("promoted");
  await acksReach(rig, "after-promotion", 60);
  await rig.load.stop();
  await drained(rig);
  mark("drained after promotion");
  t.diagnostic(marks.join("; "));
  return { rig, fork: fork.rows.map((r) => Number(r.last)), tailIds };
}

test("asynchronous replication: the lost tail is exactly the writes after the cut; JetStream, webhooks and Redis realign to the new primary, what a receiver got of the tail is reported, audit clean", async (t) => {
  const { rig, fork, tailIds } = await asyncFailover(t);
  const timeline = (await rig.pool.query<{ t: number }>("SELECT ledger_timeline() AS t")).rows[0]!.t;
  assert.equal(timeline, 2, "the promoted standby writes on timeline 2");
  // Facts: every write acknowledged before the cut is there, every tail write is not, every write after the promotion is.
  for (const a of rig.acks) {
    if (a.phase === "before-cut") assert.ok(await hasOutboxRow(rig, a, 1), `acknowledged ${JSON.stringify(a)} kept`);
    if (a.phase === "tail") assert.ok(!(await hasOutboxRow(rig, a, 1)), `tail ${JSON.stringify(a)} lost`);
    if (a.phase === "after-promotion") assert.ok(await hasOutboxRow(rig, a, 2), `${JSON.stringify(a)} written`);
  }
  // The new primary numbered its events from the fork on: the tail's positions now name other events.
  const reused = await outboxEvents(rig, `timeline = 2`);
  assert.ok(
    [...rig.acks.filter((a) => a.phase === "tail")].some(
      (a) => a.seq > fork[a.part]! && a.seq <= Math.max(...[...reused].map((k) => Number(k.split(":")[1]))),
    ),
    "some tail position was handed out again",
  );
  await assertViewsEqualTruth(rig);

  // JetStream holds every event of the new primary after the fork, each under its own identity.
  const stream = await streamEvents(rig);
  const missing = [...reused].filter((k) => !stream.has(k));
  assert.deepEqual(missing, [], "no event of the new timeline was dropped as a duplicate");

  // The receiver: every event of the new primary, under its id; beyond them, exactly the reported tail deliveries.
  const truthIds = await outboxWebhookIds(rig);
  const received = new Set(rig.receiver.deliveries.filter((d) => d.status === 200).map((d) => d.id));
  assert.deepEqual(
    [...truthIds].filter((id) => !received.has(id)),
    [],
    "every event of the new primary delivered",
  );
  const extra = [...received].filter((id) => !truthIds.has(id)).sort();
  const reported = (
    await rig.pool.query<{ webhook_id: string }>("SELECT webhook_id FROM webhook_lost_delivery ORDER BY webhook_id")
  ).rows.map((r) => r.webhook_id);
  assert.deepEqual(extra, reported, "what the receiver holds beyond the facts is what was reported");
  assert.deepEqual(reported, [...tailIds].sort(), "the reported deliveries are the tail's");
  assert.deepEqual(rig.lostReported.map((d) => d.webhookId).sort(), reported, "reported once, through onLost too");
  assert.deepEqual(
    await droppedByReceiverDedup(rig),
    [],
    "a receiver de-duplicating by webhook-id processes every new event",
  );
  const audit = await fullAudit(rig.ledger);
  assert.equal(audit.findings.lostWebhookDeliveries, tailIds.size);
  // Dead letters of the tail's copies (if the broker had some unacked at the kill) are reported as lost, nothing else.
  assert.deepEqual(
    rig.deadLetters.filter((d) => d.reason !== "lost"),
    [],
  );
  t.diagnostic(
    `acks before cut ${rig.acks.filter((a) => a.phase === "before-cut").length}, tail ${tailIds.size}, after promotion ${rig.acks.filter((a) => a.phase === "after-promotion").length}; ` +
      `writes unanswered at the kill ${rig.unanswered}; lost dead letters ${rig.deadLetters.length}; events of timeline 2 ${reused.size}`,
  );
});

test("negative control: ids without the timeline lose events of the new primary in JetStream and at a de-duplicating webhook receiver, and a Redis layer that does not realign counts the lost tail", async (t) => {
  t.after(feederWithoutRealign());
  const { rig } = await asyncFailover(t, { messageId: positionOnlyMessageId, positionOnlyWebhookIds: true });
  const reused = await outboxEvents(rig, `timeline = 2`);
  const stream = await streamEvents(rig);
  const missing = [...reused].filter((k) => !stream.has(k));
  assert.ok(missing.length > 0, "the broker dropped an event of the new timeline as a duplicate of a lost one");
  const drift = await redisDrift(rig);
  assert.ok(
    drift.some((d) => d.startsWith(`${TAIL_ITEM}:`)),
    `Redis still counts the lost tail (items off: ${drift.join(", ") || "none"})`,
  );
  const dropped = await droppedByReceiverDedup(rig);
  assert.ok(dropped.length > 0, "a receiver de-duplicating by webhook-id drops new events as repeats of lost ones");
  t.diagnostic(
    `events of timeline 2 missing from the stream: ${missing.length} of ${reused.size}; dropped by the receiver's dedup: ${dropped.length}; Redis counts off: ${drift.join(", ")}`,
  );
});

test("synchronous replication: every acknowledged write survives the kill -9 of the primary, nothing is reported lost, every view equals the facts", async (t) => {
  const rig = await startRig(t, { synchronous: true });
  startLoad(rig, 0);
  await acksReach(rig, "before-cut", 80);
  await failOver(rig);
  await acksReach(rig, "after-promotion", 60);
  await rig.load.stop();
  await drained(rig);
  for (const a of rig.acks) {
    assert.ok(
      await hasOutboxRow(rig, a, a.phase === "after-promotion" ? 2 : 1),
      `acknowledged ${JSON.stringify(a)} kept`,
    );
  }
  await assertViewsEqualTruth(rig);
  const truthIds = await outboxWebhookIds(rig);
  const received = new Set(rig.receiver.deliveries.filter((d) => d.status === 200).map((d) => d.id));
  assert.deepEqual(
    [...truthIds].filter((id) => !received.has(id)),
    [],
  );
  assert.deepEqual(
    [...received].filter((id) => !truthIds.has(id)),
    [],
    "the receiver holds no event the facts lack",
  );
  assert.equal((await fullAudit(rig.ledger)).findings.lostWebhookDeliveries, 0);
  assert.deepEqual(rig.deadLetters, []);
  t.diagnostic(`acks ${rig.acks.length}; writes unanswered at the kill ${rig.unanswered}`);
});
