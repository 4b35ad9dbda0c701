import type { JetStreamClient } from "@nats-io/jetstream";
import type { Pool, PoolClient } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import { eventSubject, messageId } from "./jetstream-setup.ts";
import type { TransportConfig } from "./transport-config.ts";
import type { OutboxEvent, OutboxKindName, OutboxReaders } from "./transport-kinds.ts";
import { outboxTimelines } from "./event-timeline.ts";
import { advanceRelayWatermark, ensureRelayRows, readRelayWatermark, transportLag } from "./relay-watermark.ts";

/** pg advisory lock key of the relay's leadership: "relaylead" in ASCII, distinct from the rebuilds' keys. */
export const RELAY_LEADER_LOCK_KEY = 0x72656c61796c64n.toString();

export interface RelayOptions {
  kinds: readonly OutboxKindName[];
  /** Events per kind and partition per pass. */
  batchSize?: number;
  /**
   * Hook points ({kind, part, from, upto}): `relay.beforePublish`: the batch is read from the outbox, nothing of it sent yet;
   * `relay.afterPublish`: every event of the batch acknowledged by JetStream, progress not yet recorded.
   */
  hooks?: Hooks;
  /** Called after each recorded batch: how many were stored, how many the duplicate window dropped. */
  onPublished?: (kind: OutboxKindName, part: number, stored: number, duplicates: number) => void;
  /** Called when this relay takes or loses the leader lock. */
  onLeadership?: (leading: boolean) => void;
  /** Replaces messageId: for the negative control that leaves the timeline out only. */
  messageId?: (kind: OutboxKindName, part: number, seq: number, timeline: number) => string;
}

/**
 * Publishes each outbox to JetStream, per partition in sequence (commit) order, and
 * records its progress in relay_watermark only after JetStream acknowledged every message of the
 * batch: a crash in between re-publishes (the duplicate window drops the copies with the same
 * Nats-Msg-Id), it never skips. Only the contiguous prefix above the relay's watermark is published:
 * with gapless, commit-ordered numbering every visible row is final, and a hole (which that numbering
 * rules out) would make the relay wait at it rather than pass it.
 *
 * One relay process leads at a time (a session advisory lock); others stand by and take over when the
 * leader's connection ends. Leadership saves work only: two relays publishing at once would publish
 * the same ids and take the watermark to the larger of two published prefixes.
 */
export class OutboxRelay {
  private leader: PoolClient | undefined;
  private readonly hooks: Hooks;
  /** Whether this relay held the lock at its last pass (undefined before the first). */
  leading: boolean | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly kinds: OutboxReaders,
    private readonly js: JetStreamClient,
    private readonly config: TransportConfig,
    private readonly options: RelayOptions,
  ) {
    this.hooks = options.hooks ?? new Hooks();
  }

  async init(): Promise<void> {
    for (const kind of this.options.kinds) await ensureRelayRows(this.pool, kind);
  }

  /** One pass over every kind and partition; returns how many events it published. */
  async passOnce(): Promise<number> {
    const leading = await this.lead();
    if (leading !== this.leading) this.options.onLeadership?.(leading);
    this.leading = leading;
    if (!leading) return 0;
    // One statement finds the partitions with unpublished events, so an idle relay costs one query per pass.
    const behind = (await transportLag(this.pool)).filter(
      (r) => this.options.kinds.includes(r.kind) && r.published !== null && r.last > r.published,
    );
    let published = 0;
    for (const { kind, part } of behind) published += await this.publishPartition(kind, part);
    return published;
  }

  /** Publishes the next batch of one partition; returns the number of events it covered. */
  async publishPartition(kind: OutboxKindName, part: number): Promise<number> {
    const from = await readRelayWatermark(this.pool, kind, part);
    const rows = await this.kinds[kind].fetchRange(part, from + 1, from + (this.options.batchSize ?? 500));
    const batch: OutboxEvent[] = [];
    for (const e of rows) {
      if (e.seq !== from + 1 + batch.length) break;
      batch.push(e);
    }
    if (batch.length === 0) return 0;
    const upto = batch[batch.length - 1]!.seq;
    await this.hooks.at("relay.beforePublish", { kind, part, from: from + 1, upto });
    const subject = eventSubject(this.config, kind, part);
    const timelines = await outboxTimelines(this.pool, kind, part, from + 1, upto);
    const identify = this.options.messageId ?? messageId;
    // Sent in seq order on one connection, so JetStream stores them in that order; the acks come back in any order.
    const acks = await Promise.all(
      batch.map((e) => {
        // A row gone since the batch was read was pruned below every consumer: its copy is a duplicate anyway.
        const timeline = timelines.get(e.seq) ?? 1;
        return this.js.publish(subject, JSON.stringify({ ...e, timeline }), {
          msgID: identify(kind, part, e.seq, timeline),
          expect: { streamName: this.config.stream },
        });
      }),
    );
    await this.hooks.at("relay.afterPublish", { kind, part, from: from + 1, upto });
    await advanceRelayWatermark(this.pool, kind, part, upto);
    const duplicates = acks.filter((a) => a.duplicate).length;
    this.options.onPublished?.(kind, part, batch.length - duplicates, duplicates);
    return batch.length;
  }

  /** Whether this process holds the relay lock (taking it if free); a broken lock connection is given up. */
  private async lead(): Promise<boolean> {
    if (this.leader) {
      try {
        await this.leader.query("SELECT 1");
        return true;
      } catch {
        this.dropLeader();
      }
    }
    const client = await this.pool.connect();
    client.on("error", () => undefined); // a dead lock connection is noticed by the next pass's SELECT 1
    try {
      const { rows } = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_lock($1) AS ok", [
        RELAY_LEADER_LOCK_KEY,
      ]);
      if (rows[0]!.ok) {
        this.leader = client;
        return true;
      }
      client.release();
      return false;
    } catch (err) {
      client.release(true);
      throw err;
    }
  }

  private dropLeader(): void {
    this.leader?.release(true);
    this.leader = undefined;
  }

  /** Gives up leadership (closing the lock's connection releases the lock). */
  close(): void {
    this.dropLeader();
  }
}
