import type { Ledger } from "../ledger.ts";
import { MalformedEventError } from "./transport-errors.ts";

/** The outboxes the transport carries (their consumers: LikeConsumer, RelationProjector, the comment CounterConsumer). */
export type TransportKindName = "likes" | "relations" | "comments";

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
  /** Outbox rows with seq in [from, to], in seq order, processed or not. */
  fetchRange(part: number, from: number, to: number): Promise<OutboxEvent[]>;
  /** Unprocessed outbox rows above the watermark (the gaps first): what the gap filler applies. */
  fetchPending(part: number, limit: number): Promise<OutboxEvent[]>;
  /** Applies one partition's batch; throws InvalidInputError when an event differs from the outbox. */
  applyBatch(events: readonly OutboxEvent[]): Promise<{ verdicts: Record<string, number>; watermark: number }>;
  /** Turns a decoded JSON object back into the consumer's event type (dates are strings on the wire). */
  revive(json: Record<string, unknown>): OutboxEvent;
}

export const TRANSPORT_KINDS: readonly TransportKindName[] = ["likes", "relations", "comments"];

function verdictsOf(result: object, names: readonly string[]): Record<string, number> {
  return Object.fromEntries(names.map((n) => [n, Number((result as Record<string, unknown>)[n] ?? 0)]));
}

export function transportKinds(ledger: Ledger): Record<TransportKindName, TransportKind> {
  const plain = (json: Record<string, unknown>) => json as unknown as OutboxEvent;
  return {
    likes: {
      kind: "likes",
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
  };
}
