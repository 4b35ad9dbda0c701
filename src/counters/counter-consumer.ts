import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { watermarkTablesOf, type CountEvent, type CounterSpec } from "./counter-spec.ts";
import {
  addTally,
  CONSUMER_BATCH,
  drainBatches,
  inPartitionsBatch,
  partitionOfBatch,
  partitionsOfBatch,
  pollPartitions,
} from "./partition-batch.ts";
import { fetchPendingSql } from "./watermark.ts";

export interface CounterStats {
  applied: number;
  covered: number;
  dup: number;
}

export function emptyCounterStats(): CounterStats {
  return { applied: 0, covered: 0, dup: 0 };
}

export function addCounterStats(into: CounterStats, from: CounterStats): CounterStats {
  return addTally(into, from);
}

/**
 * How a batch of one or more partitions' events takes effect (figure 32-2), with their watermark
 * rows and every count row of the batch already locked. It must register each event in the
 * processed table in the same transaction as the count change: the primary key insert and
 * the increment committing together is what makes a redelivered event a no-op. Replaceable
 * only so that a negative control can show what breaks without it.
 */
export type CounterApply = (client: PoolClient, events: readonly CountEvent[]) => Promise<CounterStats>;

interface OutboxRow {
  part: number;
  seq: number;
  fact_id: string;
  key: string;
  delta: number;
  version: number;
}

function toEvent(r: OutboxRow): CountEvent {
  return { part: r.part, seq: r.seq, factId: r.fact_id, key: r.key, delta: r.delta === 1 ? 1 : -1, version: r.version };
}

function outboxColumns(s: CounterSpec): string {
  return `o.part, o.seq, o.${s.factColumn} AS fact_id, o.${s.keyColumn} AS key, o.delta, o.version`;
}

/**
 * The de-duplicating apply, set-based, one statement per batch (of one or more partitions): an
 * event at or below its row's base_seq is COVERED (already in the rebuild baseline), above it
 * APPLIED; the insert into the processed table decides which events are new, and only the new
 * APPLIED ones add their delta. An event at or below its partition's watermark is a duplicate
 * without asking the processed table (the watermark is contiguous: every such event was
 * processed), so dedup does not depend on keys below it staying there, which is what lets a
 * retention rule prune them.
 */
export function applyWithDedup(s: CounterSpec): CounterApply {
  const sql = `
    WITH ev AS (SELECT * FROM unnest($1::int[], $2::bigint[], $3::text[], $4::int[]) AS e(part, seq, key, delta)),
    fresh AS (
      INSERT INTO ${s.processed} (part, seq, how)
      SELECT ev.part, ev.seq, CASE WHEN ev.seq <= c.base_seq THEN 'COVERED' ELSE 'APPLIED' END
        FROM ev JOIN ${s.watermark} w ON w.part = ev.part AND ev.seq > w.applied_upto
                JOIN ${s.count} c ON c.${s.keyColumn} = ev.key AND c.part = ev.part
      ON CONFLICT DO NOTHING
      RETURNING part, seq, how),
    added AS (  -- runs to completion although nothing reads it (data-modifying CTE)
      UPDATE ${s.count} c SET n = c.n + d.delta
        FROM (SELECT ev.part, ev.key, sum(ev.delta) AS delta FROM fresh JOIN ev USING (part, seq)
               WHERE fresh.how = 'APPLIED' GROUP BY ev.part, ev.key) d
       WHERE c.${s.keyColumn} = d.key AND c.part = d.part
      RETURNING 1)
    SELECT count(*) FILTER (WHERE how = 'APPLIED')::int AS applied,
           count(*) FILTER (WHERE how = 'COVERED')::int AS covered
      FROM fresh`;
  return async (client, events) => {
    const distinct = [...new Map(events.map((e) => [`${e.part}:${e.seq}`, e])).values()];
    const { rows } = await client.query<{ applied: number; covered: number }>({
      name: `${s.kind}_apply`,
      text: sql,
      values: [
        distinct.map((e) => e.part),
        distinct.map((e) => e.seq),
        distinct.map((e) => e.key),
        distinct.map((e) => e.delta),
      ],
    });
    const { applied, covered } = rows[0]!;
    return { applied, covered, dup: events.length - applied - covered };
  };
}

/**
 * Applies delivered outbox events to a counter, exactly once per event whatever the delivery
 * does (the like consumer's algorithm, written once against a CounterSpec). A batch is one
 * transaction over one or more partitions (inPartitionsBatch): lock the watermark rows in
 * partition order, check a delivered batch against the outbox, create and lock the batch's count
 * rows in (partition, key) order, apply (APPLIED / COVERED / dup per event), advance each
 * contiguous watermark. A count is never clamped: a negative n is the audit's to report. Hook
 * points (prefixed with spec.hookPrefix), on the path every batch takes, once per partition of the
 * batch in partition order: consumer.afterLock {part, events, pid} between locking the count rows
 * and applying, consumer.beforeCommit {part, events, pid}.
 */
export class CounterConsumer {
  private readonly hooks: Hooks;
  private readonly apply: CounterApply;
  private readonly sql: {
    fetchPending: string;
    fetchRange: string;
    fetchSeqs: string;
    createRows: string;
    lockRows: string;
  };

  constructor(
    private readonly pool: Pool,
    readonly spec: CounterSpec,
    /** `apply` replaces applyWithDedup: for negative controls only. */
    options: { hooks?: Hooks; apply?: CounterApply } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.apply = options.apply ?? applyWithDedup(spec);
    const s = spec;
    const columns = outboxColumns(s);
    this.sql = {
      fetchPending: fetchPendingSql(s.outbox, columns, watermarkTablesOf(s)),
      fetchRange: `SELECT ${columns} FROM ${s.outbox} o WHERE o.part = $1 AND o.seq BETWEEN $2 AND $3 ORDER BY o.seq`,
      // The retention floor (docs/retention.md) with the rows, in one statement.
      fetchSeqs: `SELECT f.floor, ${columns}
                    FROM (SELECT coalesce((SELECT pruned_upto FROM retention_floor WHERE kind = $3 AND part = $1), 0) AS floor) f
                    LEFT JOIN ${s.outbox} o ON o.part = $1 AND o.seq = ANY ($2::bigint[])`,
      createRows: `INSERT INTO ${s.count} (${s.keyColumn}, part)
                   SELECT k.key, k.part FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS k(key, part, ord) ORDER BY k.ord
                   ON CONFLICT DO NOTHING`,
      lockRows: `SELECT 1 FROM ${s.count} c
                   JOIN unnest($1::text[], $2::int[]) WITH ORDINALITY AS k(key, part, ord) ON c.${s.keyColumn} = k.key AND c.part = k.part
                  ORDER BY k.ord FOR UPDATE OF c`,
    };
  }

  /**
   * Applies a batch of events that all belong to one partition. A redelivered event at or below
   * the retention floor is `expired`: its outbox row is pruned, so it cannot be checked, and it
   * is at or below the watermark, so it is a duplicate; it counts as dup and touches nothing
   * (docs/retention.md).
   */
  async applyBatch(events: readonly CountEvent[]): Promise<CounterStats & { watermark: number; expired: number }> {
    const part = partitionOfBatch(events);
    const { watermarks, ...stats } = await this.applyEvents(events, true);
    return { ...stats, watermark: watermarks.get(part)! };
  }

  /**
   * Applies a round that this consumer's fetchPending read from the outbox itself, one batch per
   * partition, in one transaction: count rows belong to one partition, so a round holds no row
   * another partition's consumer could want. Outbox rows never change (a prune only deletes rows
   * at or below the watermark, which the apply treats as duplicates), so checking them against the
   * outbox again would only read the same rows twice. Everything else, hook points included, is
   * applyBatch's path.
   */
  async applyRound(
    batches: readonly (readonly CountEvent[])[],
  ): Promise<CounterStats & { watermarks: Map<number, number>; expired: number }> {
    return this.applyEvents(batches.flat(), false);
  }

  private async applyEvents(
    events: readonly CountEvent[],
    delivered: boolean,
  ): Promise<CounterStats & { watermarks: Map<number, number>; expired: number }> {
    const parts = partitionsOfBatch(events);
    const byPart = parts.map((part) => ({ part, events: events.filter((e) => e.part === part) }));
    return inPartitionsBatch(
      this.pool,
      watermarkTablesOf(this.spec),
      parts,
      async (client) => {
        // A delivered batch is one partition's (applyBatch): checked against that partition's outbox.
        const checked = delivered ? await this.requireOutboxMatch(client, parts[0]!, events) : events;
        const expired = events.length - checked.length;
        // Count rows are created and locked in (partition, key) order, the same for every consumer,
        // with the partitions' watermark rows held; a rebuild install locks only the rows of one key,
        // in partition order: no lock cycle can form (docs/write-path.md, "The consumers' round").
        const rows = [...new Map(checked.map((e) => [`${e.part}\0${e.key}`, e])).values()].sort((x, y) =>
          x.part !== y.part ? x.part - y.part : x.key < y.key ? -1 : x.key > y.key ? 1 : 0,
        );
        const values = [rows.map((e) => e.key), rows.map((e) => e.part)];
        await client.query({ name: `${this.spec.kind}_create_rows`, text: this.sql.createRows, values });
        await client.query({ name: `${this.spec.kind}_lock_rows`, text: this.sql.lockRows, values });
        const pid = backendPid(client);
        for (const b of byPart) await this.hooks.at(`${this.spec.hookPrefix}consumer.afterLock`, { ...b, pid });
        const stats = checked.length > 0 ? await this.apply(client, checked) : emptyCounterStats();
        return { ...stats, dup: stats.dup + expired, expired };
      },
      async (pid) => {
        for (const b of byPart) await this.hooks.at(`${this.spec.hookPrefix}consumer.beforeCommit`, { ...b, pid });
      },
    );
  }

  /**
   * Up to `limit` unprocessed events of a partition above its watermark (and above `after`: the
   * last seq of a batch still being applied, so the next batch is read meanwhile). Read without
   * locks, so competing consumers may fetch overlapping batches; the processed table absorbs the overlap.
   */
  async fetchPending(part: number, limit: number, after = 0): Promise<CountEvent[]> {
    // A named statement is parsed and planned once per connection.
    const { rows } = await this.pool.query<OutboxRow>({
      name: `${this.spec.kind}_fetch_pending`,
      text: this.sql.fetchPending,
      values: [part, limit, after],
    });
    return rows.map(toEvent);
  }

  /** Events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<CountEvent[]> {
    const { rows } = await this.pool.query<OutboxRow>(this.sql.fetchRange, [part, fromSeq, toSeq]);
    return rows.map(toEvent);
  }

  /** One pass over the given partitions; returns what it did. An aborted `signal` ends it after the round being applied. */
  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<CounterStats> {
    return pollPartitions(this, emptyCounterStats, parts, batchSize, signal);
  }

  /** Consumes until every partition's watermark has reached its sequence. */
  async drain(batchSize = CONSUMER_BATCH): Promise<CounterStats> {
    return drainBatches(this.pool, watermarkTablesOf(this.spec), this.spec.kind, this, emptyCounterStats, batchSize);
  }

  /**
   * A transport carries copies; the outbox is the truth. A delivered event that is not in the
   * outbox, or differs from its row, is refused before it can touch a count. Returns the events
   * above the retention floor (read in the same statement as the rows, so a prune committing
   * meanwhile is seen whole or not at all); the ones at or below it are pruned duplicates.
   */
  private async requireOutboxMatch(
    client: PoolClient,
    part: number,
    events: readonly CountEvent[],
  ): Promise<CountEvent[]> {
    const { rows } = await client.query<OutboxRow & { floor: number }>(this.sql.fetchSeqs, [
      part,
      events.map((e) => e.seq),
      this.spec.kind,
    ]);
    const floor = rows[0]!.floor;
    const stored = new Map(rows.filter((r) => r.seq !== null).map((r) => [r.seq, toEvent(r)]));
    const kept = events.filter((e) => e.seq > floor);
    for (const e of kept) {
      const s = stored.get(e.seq);
      if (!s || s.factId !== e.factId || s.key !== e.key || s.delta !== e.delta || s.version !== e.version) {
        throw new InvalidInputError(
          "events",
          `event ${part}:${e.seq} ${s ? "does not match" : "is not in"} the outbox`,
        );
      }
    }
    return kept;
  }
}
