/**
 * A network partition between the JetStream transport and its broker: packets dropped, no reset.
 * `relay --transport nats` and `worker --transport nats` run inside a network namespace
 * (test/support/netns.ts) and reach nats-server over one veth pair (the NATS link), PostgreSQL over
 * another (never cut), and serve their /metrics to the test over a third. serve runs on the host
 * with --no-workers, so only the transport moves events from the outboxes to the views. The NATS
 * link is taken down on the host's side while eight like/unlike clients write over HTTP:
 * - both processes notice the silent connection by unanswered pings within
 *   (LEDGER_NATS_MAX_PINGS_OUT + 1) x LEDGER_NATS_PING_INTERVAL_MS (docs/service.md, "Faults"):
 *   ledger_nats_connected reads 0 and each logs "nats disconnected";
 * - every write is acknowledged (PostgreSQL is the source of truth), and the relay's lag grows;
 * - after the link returns the same processes reconnect, the lag drains to zero, the counts equal the
 *   facts, `audit` is clean, and the stream holds every outbox event exactly once (none was dropped
 *   by the duplicate window as a copy of an event the broker never stored).
 * Negative control, side by side in the same run: a standby relay started with pings every 10
 * minutes still reads ledger_nats_connected 1 past the bound.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { EmbeddedCluster, clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { createPool } from "../../src/db/pool.ts";
import { eventSubject } from "../../src/transport/jetstream-setup.ts";
import { transportLag } from "../../src/transport/relay-watermark.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";
import { LineChild } from "../support/line-child.ts";
import { startClusterOnLink } from "../support/cluster-on-link.ts";
import { NetworkNamespace } from "../support/netns.ts";
import { BIN, REPO_ROOT, childEnv } from "./cli-child.ts";
import { LikeLoad, LOAD_SERVICE_ENV, verifyLikesKept } from "./like-load.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const CLIENTS = 8;
const ITEMS = 16;
const LOAD_BEFORE_FAULT = 100;
const PING_INTERVAL_MS = 1_000;
const MAX_PINGS_OUT = 2;
/** The documented bound of noticing a silent broker: the unanswered pings, and the one whose answer was cut. */
const BOUND_MS = (MAX_PINGS_OUT + 1) * PING_INTERVAL_MS;
/** Scheduling on a loaded 2-core machine, and the 25 ms between two reads of /metrics. */
const SLACK_MS = 2_500;
/** The negative control's ping interval: the largest LEDGER_NATS_PING_INTERVAL_MS accepts. */
const NO_PINGS_MS = 600_000;
const STREAM = "LEDGER";

test(
  "NATS partitioned away (packets dropped, no reset) under HTTP load: relay and worker notice by missed pings within the bound, writes go on, the lag drains after the link returns, every event is in the stream once and applied",
  { timeout: 300_000 },
  async (t) => {
    const root = await clusterTempDir("ledger-nats-partition-");
    const ns = NetworkNamespace.create();
    const children: LineChild[] = [];
    const owned: { cluster?: EmbeddedCluster; nats?: TestNats } = {};
    t.after(async () => {
      for (const child of children) if (child.alive()) await child.stop("SIGKILL");
      ns.remove();
      await owned.nats?.close();
      await owned.cluster?.stop();
      await rm(root, { recursive: true, force: true });
    });
    const pgLink = ns.addLink();
    const natsLink = ns.addLink();
    const metricsLink = ns.addLink();
    const nats = (owned.nats = await TestNats.start({ host: natsLink.here.address }));
    const { cluster, url: namespaceDatabaseUrl } = await startClusterOnLink(path.join(root, "pgdata"), pgLink);
    owned.cluster = cluster;
    const admin = createPool({ connectionString: cluster.connectionString(), max: 2 });
    t.after(() => admin.end());

    const secret = randomBytes(32).toString("hex");
    const env = childEnv({
      DATABASE_URL: cluster.connectionString(),
      LEDGER_DATA_DIR: path.join(root, "data"),
      LEDGER_JWT_SECRET: secret,
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      LOG_LEVEL: "info",
      LEDGER_AUDIT_EVERY_MS: "0",
      ...LOAD_SERVICE_ENV,
    });
    const serve = new LineChild("serve --no-workers", [BIN, "serve", "--no-workers"], { cwd: REPO_ROOT, env });
    children.push(serve);
    const address = LISTENING.exec(await serve.waitFor(LISTENING, 90_000))![1]!;

    const inNamespace = async (name: string, args: string[], vars: Record<string, string> = {}) => {
      const port = await freePort();
      const child = new LineChild(
        name,
        [BIN, ...args, "--metrics-port", String(port), "--host", metricsLink.there.address],
        {
          cwd: REPO_ROOT,
          env: {
            ...env,
            DATABASE_URL: namespaceDatabaseUrl,
            NATS_URL: nats.url,
            LEDGER_NATS_PING_INTERVAL_MS: String(PING_INTERVAL_MS),
            LEDGER_NATS_MAX_PINGS_OUT: String(MAX_PINGS_OUT),
            LEDGER_NATS_ACK_WAIT_MS: "1000",
            LEDGER_GAP_CHECK_MS: "3000",
            ...vars,
          },
          wrapper: ns.exec,
        },
      );
      children.push(child);
      const metricsUrl = new URL(`http://${metricsLink.there.address}:${port}/metrics`);
      const connected = async () => {
        const text = await (await fetch(metricsUrl)).text();
        return /^ledger_nats_connected (\d)/m.exec(text)?.[1];
      };
      return { child, connected };
    };
    const relay = await inNamespace("relay", ["relay", "--transport", "nats"]);
    await relay.child.waitFor(/"msg":"leading/, 90_000);
    const worker = await inNamespace("worker", ["worker", "--transport", "nats"]);
    await worker.child.waitFor(/"msg":"started"/, 90_000);
    // The control starts once the relay leads, so it stands by: its connection is idle, as a
    // connection whose only traffic would be the pings.
    const control = await inNamespace("relay without pings", ["relay", "--transport", "nats"], {
      LEDGER_NATS_PING_INTERVAL_MS: String(NO_PINGS_MS),
    });
    await control.child.waitFor(/"msg":"standing by/, 90_000);

    const lag = async () => {
      const rows = await transportLag(admin);
      return {
        unpublished: rows.reduce((a, r) => a + r.last - (r.published ?? 0), 0),
        unapplied: rows.reduce((a, r) => a + r.last - r.applied, 0),
      };
    };
    const load = await LikeLoad.prepare(address, secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    for (const p of [relay, worker, control]) assert.equal(await p.connected(), "1", "connected before the cut");
    await pollUntil("the transport keeps up before the cut", lag, (l) => l.unapplied < 50, 60_000);

    ns.cut(natsLink);
    const cutAt = performance.now();
    const noticed = async (p: typeof relay) => {
      await pollUntil(`${p.child.name} noticed the partition`, p.connected, (v) => v === "0", 60_000);
      return performance.now() - cutAt;
    };
    const [relayNoticedMs, workerNoticedMs] = await Promise.all([noticed(relay), noticed(worker)]);
    // Both waited out the bound and then some: the control has had as long to notice.
    const waitedMs = Math.max(relayNoticedMs, workerNoticedMs, BOUND_MS + SLACK_MS);
    await pollUntil(
      "the bound and slack passed",
      async () => performance.now() - cutAt,
      (ms) => ms >= waitedMs,
    );
    const controlDuring = await control.connected();
    const acknowledgedAtNotice = load.figures.acknowledged;
    const during = await load.until("writes go on", (f) => f.acknowledged >= acknowledgedAtNotice + LOAD_BEFORE_FAULT);
    const lagDuring = await pollUntil("the lag grows", lag, (l) => l.unpublished >= LOAD_BEFORE_FAULT, 60_000);
    const disconnectLogged = [relay, worker].map((p) => p.child.lines.some((l) => /"msg":"nats disconnected/.test(l)));

    ns.restore(natsLink);
    const restoredAt = performance.now();
    await Promise.all(
      [relay, worker].map((p) => pollUntil(`${p.child.name} reconnected`, p.connected, (v) => v === "1", 60_000)),
    );
    const reconnectedMs = performance.now() - restoredAt;
    await load.stop();
    const drained = await pollUntil("the lag drained", lag, (l) => l.unpublished === 0 && l.unapplied === 0, 120_000);

    t.diagnostic(
      `note noticed after the cut: relay ${relayNoticedMs.toFixed(0)} ms, worker ${workerNoticedMs.toFixed(0)} ms (bound ${BOUND_MS} ms + ${SLACK_MS} ms slack); control (pings every ${NO_PINGS_MS} ms) read ${controlDuring} after ${waitedMs.toFixed(0)} ms; acknowledged during the cut ${during.acknowledged - acknowledgedAtNotice}, 503 ${during.unavailable}, slowest ${during.slowestMs.toFixed(0)} ms; lag during ${JSON.stringify(lagDuring)}; reconnected ${reconnectedMs.toFixed(0)} ms after the link returned`,
    );
    assert.ok(relayNoticedMs <= BOUND_MS + SLACK_MS, `the relay noticed after ${relayNoticedMs.toFixed(0)} ms`);
    assert.ok(workerNoticedMs <= BOUND_MS + SLACK_MS, `the worker noticed after ${workerNoticedMs.toFixed(0)} ms`);
    assert.equal(controlDuring, "1", "without pings the dead connection is not noticed within the bound");
    assert.deepEqual(disconnectLogged, [true, true], "relay and worker log the disconnection");
    assert.deepEqual(during.unexpected, [], "every write answered 200");
    assert.equal(during.unavailable, 0, "no write refused: PostgreSQL is reachable");
    assert.deepEqual(drained, { unpublished: 0, unapplied: 0 });
    for (const p of [relay, worker]) {
      assert.ok(p.child.alive(), `${p.child.name} was not restarted`);
      assert.ok(
        p.child.lines.some((l) => /"msg":"nats reconnected/.test(l)),
        `${p.child.name} logs the reconnection`,
      );
      assert.deepEqual(
        p.child.lines.filter((l) => /"msg":"dead letter"/.test(l)),
        [],
        `${p.child.name} dead-lettered nothing`,
      );
    }

    // Every outbox event is in the stream exactly once: an event the broker dropped as a duplicate of
    // one it never stored would be missing (and only the gap filler would have applied it).
    const nc = await connect({ servers: nats.url });
    t.after(() => nc.close());
    const info = await (await jetstreamManager(nc)).streams.info(STREAM, { subjects_filter: ">" });
    const stored = info.state.subjects ?? {};
    const expected: Record<string, number> = {};
    const actual: Record<string, number> = {};
    for (const r of await transportLag(admin)) {
      if (r.last === 0) continue;
      const subject = eventSubject({ stream: STREAM }, r.kind, r.part);
      expected[subject] = r.last;
      actual[subject] = stored[subject] ?? 0;
    }
    assert.deepEqual(actual, expected, "messages in the stream per subject = events in the outbox");
    const gapFilled = worker.child.lines.filter((l) => /"source":"outbox"/.test(l)).length;
    for (const p of [relay, worker]) {
      const warnings = new Map<string, number>();
      for (const l of p.child.lines) {
        const m = /"level":(\d+).*"msg":"([^"]*)"/.exec(l);
        if (m && Number(m[1]) >= 40) warnings.set(m[2]!, (warnings.get(m[2]!) ?? 0) + 1);
      }
      t.diagnostic(`note ${p.child.name}'s warnings: ${JSON.stringify(Object.fromEntries(warnings))}`);
    }
    t.diagnostic(
      `note stream messages per subject ${JSON.stringify(actual)}; worker batches from the gap filler ${gapFilled}`,
    );

    await verifyLikesKept(t, load, { adminUrl: cluster.connectionString(), address, secret, env });
    for (const p of [relay, worker])
      assert.deepEqual(await p.child.stop("SIGTERM"), { code: 0, signal: null }, p.child.name);
  },
);
