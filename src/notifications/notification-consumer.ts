import {
  addTally,
  drainBatches,
  inPartitionsBatch,
  partitionOfBatch,
  partitionsOfBatch,
  pollPartitions,
  CONSUMER_BATCH,
} from "../counters/partition-batch.ts";
import { fetchPendingSql } from "../counters/watermark.ts";
import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import {
  LOCK_RECIPIENTS_SQL,
  NOTIFICATION_COLUMNS,
  NOTIFICATION_SOURCES,
  withIdAndGroup,
  type NotificationSource,
} from "./notification-sources.ts";

/** A delivered outbox event: where it sits and the fingerprint of its row (notification-sources.ts). */
export interface NotificationEvent {
  part: number;
  seq: number;
  fingerprint: string;
}

/** applied: a row changed; skipped: new, but it notifies no one or is older than the row; dup: delivered before. */
export interface NotificationStats {
  applied: number;
  skipped: number;
  dup: number;
}

export function emptyNotificationStats(): NotificationStats {
  return { applied: 0, skipped: 0, dup: 0 };
}

/**
 * How a batch takes effect, with the watermark row and the batch's recipients locked: it must
 * register each event in the source's seen table in the same statement as its effect.
 * Replaceable only so that a negative control can show what breaks without the guards.
 */
export type NotificationApply = (
  client: PoolClient,
  source: NotificationSource,
  part: number,
  seqs: readonly number[],
) => Promise<NotificationStats>;

/**
 * The de-duplicating apply, one statement per batch: an event at or below the watermark, or
 * already in the seen table, is a dup and does nothing; a fresh event writes its pair's row
 * only if its version is above the row's (the highest version of a pair wins, so an older
 * event arriving late, or a redelivered one, changes nothing). The events' contents are read
 * from the outbox, which the batch was checked against.
 */
export const applyWithDedup: NotificationApply = async (client, source, part, seqs) => {
  const { rows } = await client.query<{ fresh: number; written: number }>({
    name: `notifications_${source.name}_apply`,
    text: `WITH fresh AS (
       INSERT INTO ${source.tables.seen} (part, seq)
       SELECT DISTINCT $1::int, s FROM unnest($2::bigint[]) AS s
        WHERE s > (SELECT applied_upto FROM ${source.tables.watermark} WHERE part = $1) ORDER BY 2
       ON CONFLICT DO NOTHING
       RETURNING seq),
     cand AS (${source.candidatesSql}),
     latest AS (SELECT DISTINCT ON (source, actor, subject, recipient) * FROM cand ORDER BY source, actor, subject, recipient, version DESC),
     written AS (
       INSERT INTO notification AS n (${NOTIFICATION_COLUMNS})
       ${withIdAndGroup("latest")} FROM latest ORDER BY latest.source, latest.actor, latest.subject, latest.recipient
       ON CONFLICT (source, actor, subject, recipient) DO UPDATE
          SET type = EXCLUDED.type, item_id = EXCLUDED.item_id, active = EXCLUDED.active,
              version = EXCLUDED.version, at = EXCLUDED.at, id = EXCLUDED.id, group_key = EXCLUDED.group_key,
              part = EXCLUDED.part, seq = EXCLUDED.seq
        WHERE n.version < EXCLUDED.version
       RETURNING 1)
     SELECT (SELECT count(*) FROM fresh)::int AS fresh, (SELECT count(*) FROM written)::int AS written`,
    values: [part, seqs],
  });
  const { fresh, written } = rows[0]!;
  return { applied: written, skipped: fresh - written, dup: seqs.length - fresh };
};

interface EventRow {
  part: number;
  seq: number;
  fingerprint: string;
}

/**
 * Applies one outbox's events to the notification view, exactly once in effect whatever the
 * delivery does, in the frame every view runs in (inPartitionsBatch: lock the watermark rows,
 * body, advance the contiguous watermarks). The body checks a delivered batch against the outbox,
 * locks the batch's recipients (LOCK_RECIPIENTS_SQL, shared with the rebuild) and applies each
 * partition's events. Hook points, once per partition of the batch: notifications.consumer.afterLock
 * {source, part, seqs, pid}, notifications.consumer.beforeCommit {source, part, seqs, pid}.
 */
export class NotificationConsumer {
  private readonly hooks: Hooks;
  private readonly apply: NotificationApply;
  private readonly sql: { fetchPending: string; fetchRange: string; fetchSeqs: string; recipients: string };

  constructor(
    private readonly pool: Pool,
    readonly source: NotificationSource,
    /** `apply` replaces applyWithDedup: for negative controls only. */
    options: { hooks?: Hooks; apply?: NotificationApply } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.apply = options.apply ?? applyWithDedup;
    const s = source;
    const columns = `o.part, o.seq, ${s.fingerprintSql} AS fingerprint`;
    this.sql = {
      fetchPending: fetchPendingSql(s.outbox, columns, s.tables),
      fetchRange: `SELECT ${columns} FROM ${s.outbox} o WHERE o.part = $1 AND o.seq BETWEEN $2 AND $3 ORDER BY o.seq`,
      fetchSeqs: `SELECT f.floor, ${columns}
                    FROM (SELECT coalesce((SELECT pruned_upto FROM retention_floor WHERE kind = $3 AND part = $1), 0) AS floor) f
                    LEFT JOIN ${s.outbox} o ON o.part = $1 AND o.seq = ANY ($2::bigint[])`,
      recipients: `WITH fresh AS (SELECT DISTINCT s AS seq FROM unnest($2::bigint[]) AS s)
                   SELECT DISTINCT c.recipient FROM (${s.candidatesSql}) c`,
    };
  }

  /** Applies a batch of one partition's events; events at or below the retention floor are pruned duplicates (`expired`). */
  async applyBatch(
    events: readonly NotificationEvent[],
  ): Promise<NotificationStats & { watermark: number; expired: number }> {
    const part = partitionOfBatch(events);
    const { watermarks, ...stats } = await this.applyEvents(events, true);
    return { ...stats, watermark: watermarks.get(part)! };
  }

  /**
   * Applies a round that fetchPending read from the outbox itself, one batch per partition, in one
   * transaction: the recipients of the whole round are locked in one statement, in one order, so
   * a round waits for a recipient only while holding lower ones, as a batch of one partition does.
   * Outbox rows never change (a prune deletes only rows at or below the watermark, duplicates to the
   * apply), so they are not checked against it again. Everything else, hook points included, is
   * applyBatch's path.
   */
  async applyRound(
    batches: readonly (readonly NotificationEvent[])[],
  ): Promise<NotificationStats & { watermarks: Map<number, number>; expired: number }> {
    return this.applyEvents(batches.flat(), false);
  }

  private async applyEvents(
    events: readonly NotificationEvent[],
    delivered: boolean,
  ): Promise<NotificationStats & { watermarks: Map<number, number>; expired: number }> {
    const parts = partitionsOfBatch(events);
    const byPart = parts.map((part) => ({ part, seqs: events.filter((e) => e.part === part).map((e) => e.seq) }));
    const source = this.source.name;
    return inPartitionsBatch(
      this.pool,
      this.source.tables,
      parts,
      async (client) => {
        // A delivered batch is one partition's (applyBatch): checked against that partition's outbox.
        const kept = delivered
          ? [{ part: parts[0]!, seqs: await this.requireOutboxMatch(client, parts[0]!, events) }]
          : byPart;
        const expired = events.length - kept.reduce((n, k) => n + k.seqs.length, 0);
        const recipients = new Set<string>();
        for (const { part, seqs } of kept) {
          const { rows } = await client.query<{ recipient: string }>({
            name: `notifications_${source}_recipients`,
            text: this.sql.recipients,
            values: [part, seqs],
          });
          for (const r of rows) recipients.add(r.recipient);
        }
        await client.query({
          name: "notifications_lock_recipients",
          text: LOCK_RECIPIENTS_SQL,
          values: [[...recipients]],
        });
        const pid = backendPid(client);
        for (const { part, seqs } of byPart)
          await this.hooks.at("notifications.consumer.afterLock", { source, part, seqs, pid });
        const stats = emptyNotificationStats();
        for (const { part, seqs } of kept)
          if (seqs.length > 0) addTally(stats, await this.apply(client, this.source, part, seqs));
        return { ...stats, dup: stats.dup + expired, expired };
      },
      async (pid) => {
        for (const { part, seqs } of byPart)
          await this.hooks.at("notifications.consumer.beforeCommit", { source, part, seqs, pid });
      },
    );
  }

  /** Up to `limit` unprocessed events of a partition above its watermark and above `after` (no locks: the seen table absorbs overlaps). */
  async fetchPending(part: number, limit: number, after = 0): Promise<NotificationEvent[]> {
    const { rows } = await this.pool.query<EventRow>({
      name: `notifications_${this.source.name}_fetch_pending`,
      text: this.sql.fetchPending,
      values: [part, limit, after],
    });
    return rows;
  }

  /** Events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<NotificationEvent[]> {
    return (await this.pool.query<EventRow>(this.sql.fetchRange, [part, fromSeq, toSeq])).rows;
  }

  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<NotificationStats> {
    return pollPartitions(this, emptyNotificationStats, parts, batchSize, signal);
  }

  async drain(batchSize = CONSUMER_BATCH): Promise<NotificationStats> {
    return drainBatches(
      this.pool,
      this.source.tables,
      `notifications(${this.source.name})`,
      this,
      emptyNotificationStats,
      batchSize,
    );
  }

  /** The delivered events must be the outbox's; returns the seqs above the retention floor. */
  private async requireOutboxMatch(
    client: PoolClient,
    part: number,
    events: readonly NotificationEvent[],
  ): Promise<number[]> {
    const { rows } = await client.query<EventRow & { floor: number }>(this.sql.fetchSeqs, [
      part,
      events.map((e) => e.seq),
      this.source.name,
    ]);
    const floor = rows[0]!.floor;
    const stored = new Map(rows.filter((r) => r.seq !== null).map((r) => [r.seq, r.fingerprint]));
    const kept: number[] = [];
    for (const e of events) {
      if (e.seq <= floor) continue;
      const fingerprint = stored.get(e.seq);
      if (fingerprint === undefined || fingerprint !== e.fingerprint) {
        throw new InvalidInputError(
          "events",
          `event ${this.source.name} ${part}:${e.seq} ${fingerprint === undefined ? "is not in" : "does not match"} the outbox`,
        );
      }
      kept.push(e.seq);
    }
    return kept;
  }
}

/** The consumers of the notification view (likes, relations, comments, posts), polled and drained together. */
export class NotificationFeed {
  readonly consumers: NotificationConsumer[];

  constructor(pool: Pool, options: { hooks?: Hooks; apply?: NotificationApply } = {}) {
    this.consumers = NOTIFICATION_SOURCES.map((s) => new NotificationConsumer(pool, s, options));
  }

  consumer(name: NotificationSource["name"]): NotificationConsumer {
    return this.consumers.find((c) => c.source.name === name)!;
  }

  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<NotificationStats> {
    const total = emptyNotificationStats();
    for (const c of this.consumers) addTally(total, await c.pollOnce(parts, batchSize, signal));
    return total;
  }

  async drain(batchSize = CONSUMER_BATCH): Promise<NotificationStats> {
    const total = emptyNotificationStats();
    for (const c of this.consumers) addTally(total, await c.drain(batchSize));
    return total;
  }
}
