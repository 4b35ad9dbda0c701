/**
 * Issue 14: consumer throughput over NATS JetStream next to direct polling of the outbox, on one
 * benchmark database and a nats-server -js of its own (system binary, free port, temporary store).
 * Each side starts from a backlog of the same number of like events (first likes over the bench's items,
 * spread over every partition) and runs one loop per partition: polling reads the outbox
 * (fetchPending + applyBatch), JetStream pulls the relay's copies from one durable consumer per
 * partition and applies them through the same applyBatch. The relay's publish rate is a row too.
 */
import type { Ledger } from "../src/ledger.ts";
import { jetstream } from "@nats-io/jetstream";
import { openJetStreamWorkers } from "../src/transport/jetstream-runtime.ts";
import { connectNats, ensureStreams, jetstreamManager } from "../src/transport/jetstream-setup.ts";
import { OutboxRelay } from "../src/transport/outbox-relay.ts";
import { loadTransportConfig } from "../src/transport/transport-config.ts";
import { outboxReaders } from "../src/transport/transport-kinds.ts";
import { transportLag } from "../src/transport/relay-watermark.ts";
import { TestNats } from "../support/nats-server.ts";
import type { Figures } from "./load.ts";

export interface JetStreamRow {
  op: string;
  figures: Figures;
  note: string;
}

function throughput(events: number, seconds: number): Figures {
  return { ops: events, seconds, opsPerSec: events / seconds, p50Ms: Number.NaN, p99Ms: Number.NaN, errors: 0 };
}

async function likeLag(ledger: Ledger): Promise<number> {
  return (await transportLag(ledger.pool))
    .filter((r) => r.kind === "likes")
    .reduce((a, r) => a + r.last - r.applied, 0);
}

/** Exactly `events` like events: first likes of users of their own (`js<round>-<k>`) over `items`, 8 concurrent writers. */
async function writeBacklog(ledger: Ledger, events: number, items: readonly string[], round: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let k = next++; k < events; k = next++) await ledger.likes.like(`js${round}-${k}`, items[k % items.length]!);
    }),
  );
}

export async function jetstreamRows(
  ledger: Ledger,
  o: { events: number; batchSize: number; items: readonly string[] },
): Promise<JetStreamRow[]> {
  const nats = await TestNats.start();
  const rows: JetStreamRow[] = [];
  try {
    const parts = Array.from({ length: ledger.partitions }, (_, p) => p);
    // Both sides start with nothing pending.
    await ledger.likeConsumer.drain();

    await writeBacklog(ledger, o.events, o.items, 0);
    const backlogPolling = await likeLag(ledger);
    let t0 = performance.now();
    await Promise.all(
      parts.map(async (part) => {
        for (;;) {
          const events = await ledger.likeConsumer.fetchPending(part, o.batchSize);
          if (events.length === 0) return;
          await ledger.likeConsumer.applyBatch(events);
        }
      }),
    );
    await ledger.likeConsumer.drain(); // a watermark left behind by a racing batch (drainPartitions' rule)
    rows.push({
      op: "consumer drain, polling the outbox",
      figures: throughput(backlogPolling, (performance.now() - t0) / 1000),
      note: `backlog ${backlogPolling}, ${parts.length} loop(s), batch ${o.batchSize}`,
    });

    const config = loadTransportConfig({ NATS_URL: nats.url, LEDGER_NATS_STREAM: "BENCH" });
    const nc = await connectNats(config, "bench-relay");
    try {
      await ensureStreams(await jetstreamManager(nc), config);
      const relay = new OutboxRelay(ledger.pool, outboxReaders(ledger), jetstream(nc), config, {
        kinds: ["likes"],
        batchSize: 1000,
      });
      await relay.init(); // starts at the consumer's watermark: nothing before this backlog is published
      await writeBacklog(ledger, o.events, o.items, 1);
      const backlog = await likeLag(ledger);
      t0 = performance.now();
      while ((await relay.passOnce()) > 0);
      const relaySeconds = (performance.now() - t0) / 1000;
      relay.close();
      rows.push({
        op: "relay publish to JetStream",
        figures: throughput(backlog, relaySeconds),
        note: `${backlog} events, batches of 1000, acked by the stream`,
      });

      const workers = await openJetStreamWorkers(ledger, config, {
        partitions: parts,
        batchSize: o.batchSize,
        kinds: ["likes"],
        gapFill: false,
      });
      t0 = performance.now();
      for (const l of workers.loops) l.start();
      while ((await likeLag(ledger)) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
      const seconds = (performance.now() - t0) / 1000;
      await workers.close();
      rows.push({
        op: "consumer drain, JetStream pull",
        figures: throughput(backlog, seconds),
        note: `backlog ${backlog}, ${parts.length} durable consumer(s), batch ${o.batchSize}, same applyBatch`,
      });
    } finally {
      await nc.close();
    }
  } finally {
    await nats.close();
  }
  return rows;
}
