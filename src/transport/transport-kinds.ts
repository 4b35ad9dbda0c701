import type { Ledger } from "../ledger.ts";
import type { FeedEvent } from "../feed/feed-consumer.ts";
import { MalformedEventError } from "./transport-errors.ts";

/**
 * The outboxes the relay publishes, one subject per outbox and partition (their names are the
 * retention kinds: relay_watermark, retention_hold and message ids use them).
 */
export type OutboxKindName = "likes" | "relations" | "comments" | "posts";

export const OUTBOX_KINDS: readonly OutboxKindName[] = ["likes", "relations", "comments", "posts"];

/**
 * The consumers the transport feeds, one durable JetStream consumer per consumer and partition:
 * LikeConsumer, RelationProjector, the comment CounterConsumer, and the home timeline's two
 * FeedConsumers. An outbox may feed several (relation_event: the projector and the feed).
 */
export type TransportKindName = "likes" | "relations" | "comments" | "feed-posts" | "feed-relations";

/** The event every outbox row shares; each kind adds its own fields (LikeEvent, RelationEvent, CountEvent). */
export interface OutboxEvent {
  part: number;
  seq: number;
  /** The timeline the event was committed on: on the wire (the relay adds it), not in the consumers' own rows. */
  timeline?: number;
}

/**
 * One counted or projected kind as the transport sees it: how to read its outbox by position and
 * how to apply a delivered batch. Every method is a public method of the existing consumer
 * (LikeConsumer, RelationProjector, CounterConsumer), so the broker path and the polling path
 * apply through the same verification (the outbox is the truth) and the same dedup.
 */
export interface TransportKind {
  kind: TransportKindName;
  /** The outbox whose subject this consumer reads. */
  outbox: OutboxKindName;
  /** Outbox rows with seq in [from, to], in seq order, processed or not. */
  fetchRange(part: number, from: number, to: number): Promise<OutboxEvent[]>;
  /** Unprocessed outbox rows above the watermark (the gaps first): what the gap filler applies. */
  fetchPending(part: number, limit: number): Promise<OutboxEvent[]>;
  /** Applies one partition's batch; throws InvalidInputError when an event differs from the outbox. */
  applyBatch(events: readonly OutboxEvent[]): Promise<{ verdicts: Record<string, number>; watermark: number }>;
  /** Turns a decoded JSON object back into the consumer's event type (dates are strings on the wire). */
  revive(json: Record<string, unknown>): OutboxEvent;
}

export const TRANSPORT_KINDS: readonly TransportKindName[] = [
  "likes",
  "relations",
  "comments",
  "feed-posts",
  "feed-relations",
];

/** The outbox rows the relay publishes, by position: the event of each outbox's first consumer. */
export type OutboxReaders = Record<OutboxKindName, Pick<TransportKind, "fetchRange">>;

function text(json: Record<string, unknown>, field: string, kind: TransportKindName): string {
  const v = json[field];
  if (typeof v === "string" || (typeof v === "number" && Number.isSafeInteger(v))) return String(v);
  throw new MalformedEventError(kind, `${field} is not a string or an integer`);
}

/**
 * A feed consumer's event from the outbox row the relay published: its fingerprint is the one
 * FeedSource.fingerprintSql computes from the row (fields joined by '/'), which applyBatch checks
 * against the outbox, so a copy that differs from its row is refused there.
 */
function feedEvent(json: Record<string, unknown>, kind: TransportKindName, fields: readonly string[]): FeedEvent {
  return {
    part: json.part as number,
    seq: json.seq as number,
    fingerprint: fields.map((f) => text(json, f, kind)).join("/"),
  };
}

/** The post events as the relay publishes them (post_outbox rows; nothing else reads them by position). */
async function fetchPostEvents(ledger: Ledger, part: number, from: number, to: number): Promise<OutboxEvent[]> {
  const { rows } = await ledger.pool.query<OutboxEvent>(
    `SELECT part, seq, post_id AS "postId", author, kind, version FROM post_outbox
      WHERE part = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`,
    [part, from, to],
  );
  return rows;
}

function verdictsOf(result: object, names: readonly string[]): Record<string, number> {
  return Object.fromEntries(names.map((n) => [n, Number((result as Record<string, unknown>)[n] ?? 0)]));
}

export function transportKinds(ledger: Ledger): Record<TransportKindName, TransportKind> {
  const plain = (json: Record<string, unknown>) => json as unknown as OutboxEvent;
  return {
    likes: {
      kind: "likes",
      outbox: "likes",
      fetchRange: (part, from, to) => ledger.likeConsumer.fetchRange(part, from, to),
      fetchPending: (part, limit) => ledger.likeConsumer.fetchPending(part, limit),
      applyBatch: async (events) => {
        const r = await ledger.likeConsumer.applyBatch(events as Parameters<Ledger["likeConsumer"]["applyBatch"]>[0]);
        return { verdicts: verdictsOf(r, ["applied", "covered", "dup"]), watermark: r.watermark };
      },
      revive: plain,
    },
    relations: {
      kind: "relations",
      outbox: "relations",
      fetchRange: (part, from, to) => ledger.projector.fetchRange(part, from, to),
      fetchPending: (part, limit) => ledger.projector.fetchPending(part, limit),
      applyBatch: async (events) => {
        const r = await ledger.projector.applyBatch(events as Parameters<Ledger["projector"]["applyBatch"]>[0]);
        return { verdicts: verdictsOf(r, ["applied", "stale", "dup"]), watermark: r.watermark };
      },
      revive: (json) => {
        const createdAt = new Date(String(json.createdAt));
        if (Number.isNaN(createdAt.getTime()))
          throw new MalformedEventError("relations", "createdAt is not a timestamp");
        return { ...json, createdAt } as unknown as OutboxEvent;
      },
    },
    comments: {
      kind: "comments",
      outbox: "comments",
      fetchRange: (part, from, to) => ledger.commentConsumer.fetchRange(part, from, to),
      fetchPending: (part, limit) => ledger.commentConsumer.fetchPending(part, limit),
      applyBatch: async (events) => {
        const r = await ledger.commentConsumer.applyBatch(
          events as Parameters<Ledger["commentConsumer"]["applyBatch"]>[0],
        );
        return { verdicts: verdictsOf(r, ["applied", "covered", "dup"]), watermark: r.watermark };
      },
      revive: plain,
    },
    "feed-posts": feedKind(ledger, "feed-posts", "posts", ["postId", "author", "kind", "version"]),
    "feed-relations": feedKind(ledger, "feed-relations", "relations", ["follower", "followee", "state", "version"]),
  };
}

function feedKind(
  ledger: Ledger,
  kind: "feed-posts" | "feed-relations",
  outbox: "posts" | "relations",
  fields: readonly string[],
): TransportKind {
  const consumer = () => ledger.feed.consumer(outbox);
  return {
    kind,
    outbox,
    fetchRange: (part, from, to) => consumer().fetchRange(part, from, to),
    fetchPending: (part, limit) => consumer().fetchPending(part, limit),
    applyBatch: async (events) => {
      const r = await consumer().applyBatch(events as readonly FeedEvent[]);
      return { verdicts: verdictsOf(r, ["applied", "dup"]), watermark: r.watermark };
    },
    revive: (json) => feedEvent(json, kind, fields),
  };
}

export function outboxReaders(ledger: Ledger): OutboxReaders {
  const kinds = transportKinds(ledger);
  return {
    likes: kinds.likes,
    relations: kinds.relations,
    comments: kinds.comments,
    posts: { fetchRange: (part, from, to) => fetchPostEvents(ledger, part, from, to) },
  };
}
