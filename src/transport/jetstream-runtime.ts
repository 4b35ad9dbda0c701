import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import type { Ledger } from "../ledger.ts";
import { Hooks } from "../hooks.ts";
import { PartitionWorker, type PartitionWorkerOptions } from "../workers/partition-worker.ts";
import { closeNats, connectNats, ensureConsumer, ensureStreams, jetstreamManager } from "./jetstream-setup.ts";
import {
  JetStreamPartitionConsumer,
  type DeliveryStrategy,
  type JetStreamConsumerEvents,
} from "./jetstream-consumer.ts";
import { OutboxRelay, type RelayOptions } from "./outbox-relay.ts";
import type { TransportConfig } from "./transport-config.ts";
import {
  OUTBOX_KINDS,
  TRANSPORT_KINDS,
  outboxReaders,
  transportKinds,
  type OutboxKindName,
  type TransportKindName,
} from "./transport-kinds.ts";
import type { TransportMetrics } from "./transport-metrics.ts";

export interface JetStreamWorkers {
  nc: NatsConnection;
  consumers: JetStreamPartitionConsumer[];
  /** One loop per kind and partition (each its own durable consumer). */
  loops: PartitionWorker[];
  /** Stops the loops (the current batches commit and ack) and closes the connection. */
  close(): Promise<void>;
}

export interface JetStreamWorkerOptions extends JetStreamConsumerEvents, PartitionWorkerOptions {
  partitions: readonly number[];
  batchSize: number;
  kinds?: readonly TransportKindName[];
  metrics?: TransportMetrics;
  hooks?: Hooks;
  fetchExpiresMs?: number;
  /** Negative controls only. */
  gapFill?: boolean;
  deliver?: DeliveryStrategy;
}

/** `worker --transport nats`: creates the streams and the durable consumers if missing, and one consumer loop per kind and partition. */
export async function openJetStreamWorkers(
  ledger: Ledger,
  config: TransportConfig,
  options: JetStreamWorkerOptions,
): Promise<JetStreamWorkers> {
  const nc = await connectNats(config, "social-ledger-worker");
  options.metrics?.watchConnection(nc);
  try {
    const jsm = await jetstreamManager(nc);
    await ensureStreams(jsm, config);
    const kinds = transportKinds(ledger);
    const js = jetstream(nc);
    const consumers: JetStreamPartitionConsumer[] = [];
    for (const kind of options.kinds ?? TRANSPORT_KINDS) {
      for (const part of options.partitions) {
        await ensureConsumer(jsm, config, kinds[kind], part);
        consumers.push(
          new JetStreamPartitionConsumer(ledger.pool, kinds[kind], js, config, part, {
            batchSize: options.batchSize,
            fetchExpiresMs: options.fetchExpiresMs,
            hooks: options.hooks ?? ledger.hooks,
            gapFill: options.gapFill,
            deliver: options.deliver,
            onBatch: (k, p, source, verdicts) => {
              if (source === "outbox")
                options.metrics?.gapFilled.inc(
                  { kind: k },
                  Object.values(verdicts).reduce((a, b) => a + b, 0),
                );
              options.onBatch?.(k, p, source, verdicts);
            },
            onDeadLetter: (k, p, reason, error) => {
              options.metrics?.deadLetters.inc({ kind: k, reason });
              options.onDeadLetter?.(k, p, reason, error);
            },
          }),
        );
      }
    }
    // A pass already waits up to fetchExpiresMs for a message, so an empty pass needs no idle wait of its own.
    const loops = consumers.map(
      (c) => new PartitionWorker(`nats:${c.name}`, () => c.pass(), { idleMs: 10, maxBackoffMs: 5_000, ...options }),
    );
    return {
      nc,
      consumers,
      loops,
      async close() {
        await Promise.all(loops.map((l) => l.stop()));
        await Promise.all(consumers.map((c) => c.stop()));
        await closeNats(nc);
      },
    };
  } catch (err) {
    await nc.close();
    throw err;
  }
}

export interface RelayRuntime {
  nc: NatsConnection;
  relay: OutboxRelay;
  loop: PartitionWorker;
  close(): Promise<void>;
}

/** `relay --transport nats`: the outbox relay as a loop (standby until it holds the leader lock). */
export async function openRelay(
  ledger: Ledger,
  config: TransportConfig,
  options: PartitionWorkerOptions &
    Pick<RelayOptions, "onPublished" | "onLeadership"> & {
      batchSize: number;
      kinds?: readonly OutboxKindName[];
      metrics?: TransportMetrics;
      hooks?: Hooks;
    },
): Promise<RelayRuntime> {
  const nc = await connectNats(config, "social-ledger-relay");
  options.metrics?.watchConnection(nc);
  try {
    await ensureStreams(await jetstreamManager(nc), config);
    const relay = new OutboxRelay(ledger.pool, outboxReaders(ledger), jetstream(nc), config, {
      kinds: options.kinds ?? OUTBOX_KINDS,
      batchSize: options.batchSize,
      hooks: options.hooks ?? ledger.hooks,
      onLeadership: options.onLeadership,
      onPublished: (kind, part, stored, duplicates) => {
        if (stored > 0) options.metrics?.published.inc({ kind, result: "stored" }, stored);
        if (duplicates > 0) options.metrics?.published.inc({ kind, result: "duplicate" }, duplicates);
        options.onPublished?.(kind, part, stored, duplicates);
      },
    });
    await relay.init();
    const loop = new PartitionWorker("relay", () => relay.passOnce(), { idleMs: 100, maxBackoffMs: 5_000, ...options });
    return {
      nc,
      relay,
      loop,
      async close() {
        await loop.stop();
        relay.close();
        await closeNats(nc);
      },
    };
  } catch (err) {
    await nc.close();
    throw err;
  }
}
