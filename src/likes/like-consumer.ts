import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { advanceWatermark, drainPartitions, lockWatermark } from "../db/watermark.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import type { LikeEvent } from "./types.ts";

export interface ConsumeStats {
  applied: number;
  covered: number;
  dup: number;
}

export function emptyStats(): ConsumeStats {
  return { applied: 0, covered: 0, dup: 0 };
}

export function addStats(into: ConsumeStats, from: ConsumeStats): ConsumeStats {
  into.applied += from.applied;
  into.covered += from.covered;
  into.dup += from.dup;
  return into;
}

interface OutboxRow {
  part: number;
  seq: number;
  user_id: string;
  item_id: string;
  delta: number;
  version: number;
}

export function toEvent(row: OutboxRow): LikeEvent {
  return {
    part: row.part, seq: row.seq, userId: row.user_id, itemId: row.item_id,
    delta: row.delta === 1 ? 1 : -1, version: row.version,
  };
}

/**
 * How a batch of one partition's events takes effect (figure 32-2), with the watermark row
 * and every count row of the batch already locked. Both branches register each event in
 * processed_event in the same transaction as the count change, which is what makes a
 * redelivered event a no-op: the primary key insert and the increment commit together.
 */
export type ApplyBatch = (client: PoolClient, part: number, events: readonly LikeEvent[]) => Promise<ConsumeStats>;

/**
 * Set-based, one statement per batch: an event at or below its row's base_seq is COVERED
 * (already in the rebuild baseline), above it APPLIED; the insert into processed_event decides
 * which events are new, and only the new APPLIED ones add their delta. An event at or below the
 * partition's watermark is a duplicate without asking processed_event (the watermark is
 * contiguous: every such event was processed), so dedup does not depend on keys below it
 * staying in processed_event, which is what lets a retention rule prune them.
 */
export const applyWithDedup: ApplyBatch = async (client, part, events) => {
  const distinct = [...new Map(events.map((e) => [e.seq, e])).values()];
  const { rows } = await client.query<{ applied: number; covered: number }>(
    `WITH ev AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::int[]) AS e(seq, item_id, delta)
                  WHERE e.seq > (SELECT applied_upto FROM counter_watermark WHERE part = $1)),
     fresh AS (
       INSERT INTO processed_event (part, seq, how)
       SELECT $1, ev.seq, CASE WHEN ev.seq <= lc.base_seq THEN 'COVERED' ELSE 'APPLIED' END
         FROM ev JOIN like_count lc ON lc.item_id = ev.item_id AND lc.part = $1
       ON CONFLICT DO NOTHING
       RETURNING seq, how),
     added AS (  -- runs to completion although nothing reads it (data-modifying CTE)
       UPDATE like_count lc SET n = lc.n + d.delta
         FROM (SELECT ev.item_id, sum(ev.delta) AS delta FROM fresh JOIN ev USING (seq)
                WHERE fresh.how = 'APPLIED' GROUP BY ev.item_id) d
        WHERE lc.item_id = d.item_id AND lc.part = $1
       RETURNING 1)
     SELECT count(*) FILTER (WHERE how = 'APPLIED')::int AS applied,
            count(*) FILTER (WHERE how = 'COVERED')::int AS covered
       FROM fresh`,
    [part, distinct.map((e) => e.seq), distinct.map((e) => e.itemId), distinct.map((e) => e.delta)],
  );
  const { applied, covered } = rows[0]!;
  return { applied, covered, dup: events.length - applied - covered };
};

/**
 * Applies delivered outbox events to like_count, exactly once per event whatever the
 * delivery does. A batch is one transaction on one partition: lock that partition's
 * watermark row (consumers of one partition take turns, consumers of different partitions
 * run in parallel), then lock the batch's (item, partition) count rows, apply the batch in one
 * statement (APPLIED / COVERED / dup per event), and finally advance the contiguous watermark.
 */
export class LikeConsumer {
  private readonly hooks: Hooks;

  constructor(
    private readonly pool: Pool,
    private readonly options: { hooks?: Hooks; applyBatch?: ApplyBatch } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
  }

  /** Applies a batch of events that all belong to one partition. */
  async applyBatch(events: readonly LikeEvent[]): Promise<ConsumeStats & { watermark: number }> {
    const part = events[0]?.part;
    if (part === undefined) throw new InvalidInputError("events", "a batch needs at least one event");
    if (events.some((e) => e.part !== part)) throw new InvalidInputError("events", "a batch must hold events of one partition");
    const apply = this.options.applyBatch ?? applyWithDedup;
    // Count rows are created and locked in item order, the same for every consumer, and an
    // install locks only the rows of one item: no lock cycle can form.
    const items = [...new Set(events.map((e) => e.itemId))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return withTransaction(this.pool, async (client) => {
      await lockWatermark(client, "likes", part);
      await requireOutboxMatch(client, part, events);
      await client.query(
        `INSERT INTO like_count (item_id, part)
         SELECT i.item_id, $2 FROM unnest($1::text[]) WITH ORDINALITY AS i(item_id, ord) ORDER BY i.ord
         ON CONFLICT DO NOTHING`,
        [items, part],
      );
      await client.query(
        `SELECT 1 FROM like_count lc JOIN unnest($1::text[]) WITH ORDINALITY AS i(item_id, ord) USING (item_id)
          WHERE lc.part = $2 ORDER BY i.ord FOR UPDATE OF lc`,
        [items, part],
      );
      const stats = await apply(client, part, events);
      const watermark = await advanceWatermark(client, "likes", part);
      await this.hooks.at("consumer.beforeCommit", { part, events, pid: backendPid(client) });
      return { ...stats, watermark };
    });
  }

  /**
   * Reads up to `limit` events of a partition above its watermark that are not yet
   * processed. Read without locks, so competing consumers may fetch overlapping batches;
   * processed_event absorbs the overlap.
   */
  async fetchPending(part: number, limit: number): Promise<LikeEvent[]> {
    const { rows } = await this.pool.query<OutboxRow>({
      name: "like_fetch_pending",
      text: `SELECT o.part, o.seq, o.user_id, o.item_id, o.delta, o.version
               FROM like_outbox o
               JOIN counter_watermark w ON w.part = o.part
              WHERE o.part = $1 AND o.seq > w.applied_upto
                AND NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.part = o.part AND p.seq = o.seq)
              ORDER BY o.seq
              LIMIT $2`,
      values: [part, limit],
    });
    return rows.map(toEvent);
  }

  /** Reads events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<LikeEvent[]> {
    const { rows } = await this.pool.query<OutboxRow>(
      `SELECT part, seq, user_id, item_id, delta, version FROM like_outbox
        WHERE part = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`,
      [part, fromSeq, toSeq],
    );
    return rows.map(toEvent);
  }

  /** One pass over the given partitions; returns what it did. */
  async pollOnce(parts: readonly number[], batchSize = 100): Promise<ConsumeStats> {
    const total = emptyStats();
    for (const part of parts) {
      const events = await this.fetchPending(part, batchSize);
      if (events.length > 0) addStats(total, await this.applyBatch(events));
    }
    return total;
  }

  /** Consumes until every partition's watermark has reached its sequence. */
  async drain(batchSize = 200): Promise<ConsumeStats> {
    const total = emptyStats();
    await drainPartitions(this.pool, "likes", async (parts) => {
      const pass = await this.pollOnce(parts, batchSize);
      addStats(total, pass);
      return pass.applied + pass.covered + pass.dup;
    });
    return total;
  }
}


/**
 * A transport carries copies; the outbox is the truth. A delivered event that is not in the
 * outbox, or differs from its row, is refused before it can touch a count.
 */
async function requireOutboxMatch(client: PoolClient, part: number, events: readonly LikeEvent[]): Promise<void> {
  const { rows } = await client.query<OutboxRow>(
    "SELECT part, seq, user_id, item_id, delta, version FROM like_outbox WHERE part = $1 AND seq = ANY ($2::bigint[])",
    [part, events.map((e) => e.seq)],
  );
  const stored = new Map(rows.map((r) => [r.seq, toEvent(r)]));
  for (const e of events) {
    const s = stored.get(e.seq);
    if (!s || s.userId !== e.userId || s.itemId !== e.itemId || s.delta !== e.delta || s.version !== e.version) {
      throw new InvalidInputError("events", `event ${part}:${e.seq} ${s ? "does not match" : "is not in"} the outbox`);
    }
  }
}
