import { connect, nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  jetstreamManager,
  type ConsumerConfig,
  type JetStreamManager,
} from "@nats-io/jetstream";
import type { TransportConfig } from "./transport-config.ts";
import { OUTBOX_KINDS, type OutboxKindName, type TransportKind, type TransportKindName } from "./transport-kinds.ts";

/** Subject of one outbox and partition: one subject per partition, so one durable consumer reads one partition in order. */
export function eventSubject(config: Pick<TransportConfig, "stream">, kind: OutboxKindName, part: number): string {
  return `${config.stream.toLowerCase()}.${kind}.${part}`;
}

export function deadLetterSubject(
  config: Pick<TransportConfig, "stream">,
  kind: TransportKindName,
  part: number,
): string {
  return `${config.stream.toLowerCase()}.dlq.${kind}.${part}`;
}

export function deadLetterStream(config: Pick<TransportConfig, "stream">): string {
  return `${config.stream}_DLQ`;
}

/** The durable consumer every worker process shares for one consumer kind and partition. */
export function durableName(config: Pick<TransportConfig, "stream">, kind: TransportKindName, part: number): string {
  return `${config.stream}_${kind}_${part}`;
}

/**
 * The broker's duplicate window drops a re-published id; our own dedup is by (part, seq) in the database.
 * The id names the event, not only its position: a promotion with asynchronous replication hands a
 * position out again to a different event, committed on a later timeline (docs/failover.md), and the
 * same id would make the broker drop it as a copy of the lost one. Timeline 1 keeps the ids it always had.
 */
export function messageId(kind: OutboxKindName, part: number, seq: number, timeline: number): string {
  return timeline === 1 ? `${kind}:${part}:${seq}` : `${kind}:${part}:${seq}:t${timeline}`;
}

/** Connects, retrying forever (a broker restart is an outage to ride out, not a reason to exit). */
export async function connectNats(config: TransportConfig, name: string): Promise<NatsConnection> {
  return connect({
    servers: config.servers,
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
    // A broker behind a partition answers nothing and resets nothing: unanswered pings are what
    // drop the connection (then it reconnects), not TCP's retransmission limit.
    pingInterval: config.pingIntervalMs,
    maxPingOut: config.maxPingsOut,
  });
}

/**
 * Reports the connection's losses and returns: `disconnect` when the broker went away or, behind a
 * partition, when LEDGER_NATS_MAX_PINGS_OUT pings went unanswered (the client then reconnects by
 * itself), `reconnect` when it is back. The processes log both, so an outage shows in their logs.
 */
export function onConnectionChange(
  nc: NatsConnection,
  report: (change: "disconnect" | "reconnect", server: string) => void,
): void {
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect" || status.type === "reconnect") report(status.type, status.server);
    }
  })().catch(() => undefined);
}

/** Drains the connection (in-flight acks and publishes go out), or closes it when the broker does not answer within 2 s. */
export async function closeNats(nc: NatsConnection): Promise<void> {
  if (nc.isClosed()) return;
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, 2_000)));
  await Promise.race([nc.drain().catch(() => undefined), gaveUp]);
  clearTimeout(timer);
  if (!nc.isClosed()) await nc.close();
}

function isApiError(err: unknown, code: number): boolean {
  return err instanceof JetStreamApiError && err.code === code;
}

/**
 * Creates (or brings up to date) the events stream and the dead-letter stream. Both are file-backed
 * limits streams: a new consumer group could replay them, and the outbox, not the stream, is what
 * retention must keep for gap filling (docs/transport-jetstream.md).
 */
export async function ensureStreams(jsm: JetStreamManager, config: TransportConfig): Promise<void> {
  const prefix = config.stream.toLowerCase();
  const streams = [
    {
      name: config.stream,
      subjects: OUTBOX_KINDS.map((k) => `${prefix}.${k}.*`),
      duplicate_window: nanos(config.duplicateWindowSeconds * 1000),
      max_age: nanos(config.maxAgeSeconds * 1000),
    },
    {
      name: deadLetterStream(config),
      subjects: [`${prefix}.dlq.>`],
      duplicate_window: nanos(120_000),
      max_age: nanos(config.maxAgeSeconds * 1000),
    },
  ];
  for (const s of streams) {
    const cfg = {
      ...s,
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      num_replicas: 1,
    };
    try {
      await jsm.streams.info(s.name);
      await jsm.streams.update(s.name, cfg);
    } catch (err) {
      if (!isApiError(err, JetStreamApiCodes.StreamNotFound)) throw err;
      try {
        await jsm.streams.add(cfg);
      } catch (raced) {
        // Another process created it first: fine, it has our configuration.
        if (!(raced instanceof JetStreamApiError)) throw raced;
        await jsm.streams.info(s.name);
      }
    }
  }
}

/**
 * The durable pull consumer of one consumer kind and partition, on its outbox's subject (two
 * consumers of one outbox, the projector and the feed, each have their own durable and position). Redeliveries after an ack timeout back off
 * (ack_wait, then doubling); `max_deliver` bounds them, and the worker dead-letters a message on its
 * last delivery. Only features of nats-server 2.9 (one filter subject, no pause).
 */
export function consumerConfig(
  config: TransportConfig,
  kind: Pick<TransportKind, "kind" | "outbox"> | (OutboxKindName & TransportKindName),
  part: number,
): Partial<ConsumerConfig> {
  const { kind: name, outbox } = typeof kind === "string" ? { kind, outbox: kind } : kind;
  const backoff = Array.from({ length: Math.min(4, config.maxDeliver - 1) }, (_, i) =>
    nanos(config.ackWaitMs * 2 ** i),
  );
  return {
    durable_name: durableName(config, name, part),
    filter_subject: eventSubject(config, outbox, part),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(config.ackWaitMs),
    backoff,
    max_deliver: config.maxDeliver,
    max_ack_pending: 2_000,
  };
}

export async function ensureConsumer(
  jsm: JetStreamManager,
  config: TransportConfig,
  kind: Pick<TransportKind, "kind" | "outbox"> | (OutboxKindName & TransportKindName),
  part: number,
): Promise<void> {
  const cfg = consumerConfig(config, kind, part);
  const name = cfg.durable_name!;
  try {
    await jsm.consumers.info(config.stream, name);
    await jsm.consumers.update(config.stream, name, {
      ack_wait: cfg.ack_wait,
      backoff: cfg.backoff,
      max_deliver: cfg.max_deliver,
      max_ack_pending: cfg.max_ack_pending,
    });
  } catch (err) {
    if (!isApiError(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
    try {
      await jsm.consumers.add(config.stream, cfg);
    } catch (raced) {
      if (!(raced instanceof JetStreamApiError)) throw raced;
      await jsm.consumers.info(config.stream, name);
    }
  }
}

export { jetstreamManager };
