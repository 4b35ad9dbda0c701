import { headers } from "@nats-io/transport-node";
import type { ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { Pool } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { deadLetterSubject, durableName } from "./jetstream-setup.ts";
import type { TransportConfig } from "./transport-config.ts";
import { currentTimeline, outboxTimelines } from "./event-timeline.ts";
import { EventLostInFailoverError, MalformedEventError } from "./transport-errors.ts";
import type { OutboxEvent, TransportKind } from "./transport-kinds.ts";
import { consumerWatermark, readRelayWatermark } from "./relay-watermark.ts";

export type DeadLetterReason = "malformed" | "verification" | "attempts" | "lost";

export interface JetStreamConsumerEvents {
  /** A batch took effect: from the broker, or from the outbox by the gap filler. */
  onBatch?: (kind: string, part: number, source: "broker" | "outbox", verdicts: Record<string, number>) => void;
  onDeadLetter?: (kind: string, part: number, reason: DeadLetterReason, error: unknown) => void;
}

/** What the consumer hands a delivery strategy: the verified default, or a negative control. */
export interface DeliveryContext {
  pool: Pool;
  kind: TransportKind;
  part: number;
  decode(m: JsMsg): OutboxEvent;
}

/** How a fetched batch takes effect; returns the verdicts. Acks, naks and dead letters are its business. */
export type DeliveryStrategy = (consumer: JetStreamPartitionConsumer, msgs: JsMsg[]) => Promise<Record<string, number>>;

export interface JetStreamConsumerOptions extends JetStreamConsumerEvents {
  batchSize: number;
  /** How long a pass waits for a first message before it returns empty (and runs the gap check). */
  fetchExpiresMs?: number;
  /** Off only in the negative controls that show what the gap filler is for. */
  gapFill?: boolean;
  /**
   * Hook points ({kind, part, seqs}): `transport.beforeApply`; `transport.afterApply`: the batch committed, nothing acked yet;
   * `transport.afterGapCheck` ({kind, part, filled}): a gap check ended, having applied `filled` events from the outbox.
   */
  hooks?: Hooks;
  deliver?: DeliveryStrategy;
}

function add(into: Record<string, number>, from: Record<string, number>): Record<string, number> {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
  return into;
}

/**
 * Consumes one kind and partition from its durable JetStream pull consumer and applies each batch
 * through the kind's existing consumer (`applyBatch`: watermark lock, verification against the outbox,
 * dedup by processed key): the broker carries copies, the database decides. A message is acked only
 * after its batch committed; a failed apply is nak'd with a growing delay, and on its last delivery
 * (max_deliver), or at once when it cannot be an outbox event or differs from its outbox row, it goes
 * to the dead-letter stream and is terminated. None of that can lose an event: the gap filler applies
 * from the outbox whatever the broker never got through (a watermark standing still for
 * LEDGER_GAP_CHECK_MS below the position the relay had published).
 */
export class JetStreamPartitionConsumer {
  private messages: ConsumerMessages | undefined;
  /**
   * Delivered, not yet handled. Nothing here is lost by a crash: an unacknowledged message is
   * redelivered after ack_wait. Bounded by the pull's max_messages (twice the batch size).
   */
  private readonly delivered: JsMsg[] = [];
  private wake: (() => void) | undefined;
  private readonly hooks: Hooks;
  private lastWatermark = -1;
  /** The relay's published position (relay_watermark) read at the previous gap check. */
  private publishedAtLastCheck = 0;
  private lastCheckAt = Date.now();
  /** Events this consumer took from the outbox because the broker had not delivered them. */
  gapFilled = 0;

  constructor(
    readonly pool: Pool,
    readonly kind: TransportKind,
    private readonly js: JetStreamClient,
    readonly config: TransportConfig,
    readonly part: number,
    readonly options: JetStreamConsumerOptions,
  ) {
    this.hooks = options.hooks ?? new Hooks();
  }

  get name(): string {
    return durableName(this.config, this.kind.kind, this.part);
  }

  /**
   * One batch: whatever has been delivered (up to batchSize), waiting up to fetchExpiresMs for the
   * first message, then the gap check. Returns the events handled. A pull that waits for a full batch
   * (fetch) would hold a lone message for its whole expiry; consume() hands each over as it arrives.
   */
  async pass(): Promise<number> {
    await this.startPulling();
    if (this.delivered.length === 0) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, this.options.fetchExpiresMs ?? 1_000).unref();
      });
      this.wake = undefined;
    }
    const msgs = this.delivered.splice(0, this.options.batchSize);
    let handled = 0;
    if (msgs.length > 0) {
      const verdicts = await (this.options.deliver ?? deliverVerified)(this, msgs);
      this.options.onBatch?.(this.kind.kind, this.part, "broker", verdicts);
      handled += msgs.length;
    }
    if (this.options.gapFill !== false) handled += await this.fillGapIfStalled();
    return handled;
  }

  private async startPulling(): Promise<void> {
    if (this.messages) return;
    const consumer = await this.js.consumers.get(this.config.stream, this.name);
    // A pull request lasts 5 s; its idle heartbeats (half of that) tell the client of a lost broker, and it pulls again once back.
    const messages = await consumer.consume({
      max_messages: this.options.batchSize * 2,
      expires: 5_000,
      callback: (m) => {
        this.delivered.push(m);
        this.wake?.();
      },
    });
    this.messages = messages;
    void messages.closed().then(() => {
      if (this.messages === messages) this.messages = undefined;
    });
  }

  /** Stops pulling; what was delivered and not handled is nak'd so another worker gets it at once. */
  async stop(): Promise<void> {
    const messages = this.messages;
    this.messages = undefined;
    await messages?.close().catch(() => undefined);
    for (const m of this.delivered.splice(0)) m.nak();
    this.wake?.();
  }

  /** The event a message carries, checked against its subject's partition; MalformedEventError otherwise. */
  decode(m: JsMsg): OutboxEvent {
    let json: unknown;
    try {
      json = JSON.parse(m.string());
    } catch {
      throw new MalformedEventError(m.subject, "not JSON");
    }
    if (typeof json !== "object" || json === null) throw new MalformedEventError(m.subject, "not an object");
    const e = json as Record<string, unknown>;
    if (e.part !== this.part)
      throw new MalformedEventError(m.subject, `partition ${String(e.part)} on the subject of partition ${this.part}`);
    if (!Number.isSafeInteger(e.seq) || (e.seq as number) < 1)
      throw new MalformedEventError(m.subject, "seq is not a positive integer");
    if (e.timeline !== undefined && (!Number.isSafeInteger(e.timeline) || (e.timeline as number) < 1))
      throw new MalformedEventError(m.subject, "timeline is not a positive integer");
    return this.kind.revive(e);
  }

  /**
   * The messages of events committed on another timeline than the database's present one that the
   * outbox does not hold under that timeline (docs/failover.md): the row at the position has another
   * timeline, or there is no row above the watermark (a row missing at or below it was pruned, and the
   * message is a duplicate). Only messages of another timeline are looked up, so this costs one
   * statement per batch until a promotion, and one more per batch that carries old-timeline copies.
   */
  async lostInFailover<T extends { e: OutboxEvent }>(decoded: T[], watermark: number): Promise<Map<T, Error>> {
    const lost = new Map<T, Error>();
    const now = await currentTimeline(this.pool);
    const foreign = decoded.filter(({ e }) => (e.timeline ?? 1) !== now);
    if (foreign.length === 0) return lost;
    const seqs = foreign.map(({ e }) => e.seq);
    const stored = await outboxTimelines(this.pool, this.kind.outbox, this.part, Math.min(...seqs), Math.max(...seqs));
    for (const d of foreign) {
      const timeline = stored.get(d.e.seq);
      const gone = timeline === undefined ? d.e.seq > watermark : timeline !== (d.e.timeline ?? 1);
      if (gone)
        lost.set(
          d,
          new EventLostInFailoverError(
            this.kind.kind,
            this.part,
            d.e.seq,
            d.e.timeline ?? 1,
            now,
            timeline !== undefined,
          ),
        );
    }
    return lost;
  }

  /** Applies through the kind's consumer, between the beforeApply and afterApply hook points. */
  async apply(events: OutboxEvent[]): Promise<Record<string, number>> {
    await this.hooks.at("transport.beforeApply", {
      kind: this.kind.kind,
      part: this.part,
      seqs: events.map((e) => e.seq),
    });
    const r = await this.kind.applyBatch(events);
    await this.hooks.at("transport.afterApply", {
      kind: this.kind.kind,
      part: this.part,
      seqs: events.map((e) => e.seq),
    });
    return r.verdicts;
  }

  /**
   * Publishes the message to the dead-letter stream with why, then terminates it (no more redeliveries).
   * A message redelivered before its term landed (after ack_wait) is dead-lettered again under the same
   * id (its stream seq): the dead-letter stream drops that copy, and it is not counted a second time.
   */
  async deadLetter(m: JsMsg, reason: DeadLetterReason, error: unknown): Promise<void> {
    const h = headers();
    h.set("Ledger-Dead-Reason", reason);
    h.set("Ledger-Original-Subject", m.subject);
    h.set("Ledger-Stream-Seq", String(m.seq));
    h.set("Ledger-Delivery-Count", String(m.info.deliveryCount));
    h.set(
      "Ledger-Error",
      (error instanceof Error ? error.message : String(error)).slice(0, 500).replace(/[\r\n]/g, " "),
    );
    const stored = await this.js.publish(deadLetterSubject(this.config, this.kind.kind, this.part), m.data, {
      headers: h,
      msgID: `${m.subject}:${m.seq}`,
    });
    m.term();
    if (!stored.duplicate) this.options.onDeadLetter?.(this.kind.kind, this.part, reason, error);
  }

  /** Nak with a delay that doubles per delivery (capped at a minute); on the last delivery, dead-letter instead. */
  async retryLater(m: JsMsg, error: unknown): Promise<void> {
    if (m.info.deliveryCount >= this.config.maxDeliver) {
      await this.deadLetter(m, "attempts", error);
      return;
    }
    m.nak(Math.min(60_000, this.config.ackWaitMs * 2 ** (m.info.deliveryCount - 1)));
  }

  /**
   * The watermark is contiguous, so an event the broker never delivers (dead-lettered, past
   * max_deliver, aged out of the stream, lost with a broker's store) holds its partition. At each
   * check interval: when the watermark stood still since the previous check while it was below what
   * the relay had published by then, the broker has had those events for a whole interval and not
   * got them through, so they are applied from the outbox (the gaps first), through the same
   * applyBatch. Events above that position are left to the broker: the relay has not published them
   * (or has only just), and filling them would race the broker's copy.
   */
  private async fillGapIfStalled(): Promise<number> {
    if (Date.now() - this.lastCheckAt < this.config.gapCheckMs) return 0;
    this.lastCheckAt = Date.now();
    const filled = await this.fillHeldBack();
    await this.hooks.at("transport.afterGapCheck", { kind: this.kind.kind, part: this.part, filled });
    return filled;
  }

  private async fillHeldBack(): Promise<number> {
    const w = await consumerWatermark(this.pool, this.kind.kind, this.part);
    const published = await readRelayWatermark(this.pool, this.kind.outbox, this.part);
    const heldBackUpto = w === this.lastWatermark && this.publishedAtLastCheck > w ? this.publishedAtLastCheck : 0;
    this.lastWatermark = w;
    this.publishedAtLastCheck = published;
    if (heldBackUpto === 0) return 0;
    const events = (await this.kind.fetchPending(this.part, this.options.batchSize)).filter(
      (e) => e.seq <= heldBackUpto,
    );
    if (events.length === 0) return 0;
    const r = await this.kind.applyBatch(events);
    this.lastWatermark = r.watermark;
    this.gapFilled += events.length;
    this.options.onBatch?.(this.kind.kind, this.part, "outbox", r.verdicts);
    return events.length;
  }
}

/**
 * The default delivery: decode (a malformed message is dead-lettered), ack at once what is at or below
 * the watermark (processed, since the watermark is contiguous; this needs neither the outbox row nor
 * the dedup key, so retention may have pruned both), apply the rest in one batch, ack after the commit.
 * A batch refused by verification is applied one event at a time so that only the copies that differ
 * from the outbox are dead-lettered.
 */
export const deliverVerified: DeliveryStrategy = async (c, msgs) => {
  const verdicts: Record<string, number> = { dup: 0 };
  const decoded: { m: JsMsg; e: OutboxEvent }[] = [];
  for (const m of msgs) {
    try {
      decoded.push({ m, e: c.decode(m) });
    } catch (err) {
      await c.deadLetter(m, "malformed", err);
    }
  }
  const w = await consumerWatermark(c.pool, c.kind.kind, c.part);
  // Reported through the dead-letter stream and its metric, never applied and never acked as a duplicate.
  const lost = await c.lostInFailover(decoded, w);
  for (const [{ m }, error] of lost) await c.deadLetter(m, "lost", error);
  const fresh = decoded
    .filter((d) => !lost.has(d))
    .filter(({ m, e }) => {
      if (e.seq > w) return true;
      m.ack();
      verdicts.dup!++;
      return false;
    });
  if (fresh.length === 0) return verdicts;
  try {
    add(verdicts, await c.apply(fresh.map((d) => d.e)));
    for (const { m } of fresh) m.ack();
    return verdicts;
  } catch {
    // One event at a time, so that only the events that fail are retried or dead-lettered.
  }
  let failure: unknown;
  for (const { m, e } of fresh) {
    try {
      add(verdicts, await c.apply([e]));
      m.ack();
    } catch (err) {
      if (err instanceof InvalidInputError) {
        await c.deadLetter(m, "verification", err);
      } else {
        failure ??= err;
        await c.retryLater(m, err);
      }
    }
  }
  if (failure !== undefined) throw failure;
  return verdicts;
};
