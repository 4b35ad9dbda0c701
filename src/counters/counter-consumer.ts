import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { advanceWatermark, drainPartitions, lockWatermark } from "../db/watermark.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import type { CountEvent, CounterSpec } from "./counter-spec.ts";

export interface CounterStats {
  applied: number;
  covered: number;
  dup: number;
}

export function emptyCounterStats(): CounterStats {
  return { applied: 0, covered: 0, dup: 0 };
}

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

/**
 * The de-duplicating consumer of a counted fact (the like consumer's algorithm, written once
 * against a CounterSpec). A batch is one transaction on one partition: lock the partition's
 * watermark row, check the batch against the outbox, create and lock the batch's count rows in
 * key order, register each event in the processed table and add only the new APPLIED deltas
 * in one statement, advance the contiguous watermark. A redelivered event finds its processed
 * row and changes nothing. A count is never clamped: a negative n is the audit's to report.
 */
export class CounterConsumer {
  private readonly hooks: Hooks;
  private readonly sql: { outboxColumns: string; fetchPending: string; apply: string; createRows: string; lockRows: string };

  constructor(
    private readonly pool: Pool,
    readonly spec: CounterSpec,
    options: { hooks?: Hooks } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    const s = spec;
    const outboxColumns = `o.part, o.seq, o.${s.factColumn} AS fact_id, o.${s.keyColumn} AS key, o.delta, o.version`;
    this.sql = {
      outboxColumns,
      fetchPending: `SELECT ${outboxColumns} FROM ${s.outbox} o JOIN ${s.watermark} w ON w.part = o.part
                      WHERE o.part = $1 AND o.seq > w.applied_upto
                        AND NOT EXISTS (SELECT 1 FROM ${s.processed} p WHERE p.part = o.part AND p.seq = o.seq)
                      ORDER BY o.seq LIMIT $2`,
      createRows: `INSERT INTO ${s.count} (${s.keyColumn}, part)
                   SELECT k.key, $2 FROM unnest($1::text[]) WITH ORDINALITY AS k(key, ord) ORDER BY k.ord
                   ON CONFLICT DO NOTHING`,
      lockRows: `SELECT 1 FROM ${s.count} c JOIN unnest($1::text[]) WITH ORDINALITY AS k(key, ord) ON c.${s.keyColumn} = k.key
                  WHERE c.part = $2 ORDER BY k.ord FOR UPDATE OF c`,
      apply: `WITH ev AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::int[]) AS e(seq, key, delta)),
              fresh AS (
                INSERT INTO ${s.processed} (part, seq, how)
                SELECT $1, ev.seq, CASE WHEN ev.seq <= c.base_seq THEN 'COVERED' ELSE 'APPLIED' END
                  FROM ev JOIN ${s.count} c ON c.${s.keyColumn} = ev.key AND c.part = $1
                ON CONFLICT DO NOTHING
                RETURNING seq, how),
              added AS (
                UPDATE ${s.count} c SET n = c.n + d.delta
                  FROM (SELECT ev.key, sum(ev.delta) AS delta FROM fresh JOIN ev USING (seq)
                         WHERE fresh.how = 'APPLIED' GROUP BY ev.key) d
                 WHERE c.${s.keyColumn} = d.key AND c.part = $1
                RETURNING 1)
              SELECT count(*) FILTER (WHERE how = 'APPLIED')::int AS applied,
                     count(*) FILTER (WHERE how = 'COVERED')::int AS covered
                FROM fresh`,
    };
  }

  /** Applies a batch of events that all belong to one partition. */
  async applyBatch(events: readonly CountEvent[]): Promise<CounterStats & { watermark: number }> {
    const part = events[0]?.part;
    if (part === undefined) throw new InvalidInputError("events", "a batch needs at least one event");
    if (events.some((e) => e.part !== part)) throw new InvalidInputError("events", "a batch must hold events of one partition");
    const keys = [...new Set(events.map((e) => e.key))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const distinct = [...new Map(events.map((e) => [e.seq, e])).values()];
    return withTransaction(this.pool, async (client) => {
      await lockWatermark(client, this.spec.kind, part);
      await this.requireOutboxMatch(client, part, events);
      await client.query(this.sql.createRows, [keys, part]);
      await client.query(this.sql.lockRows, [keys, part]);
      const { rows } = await client.query<{ applied: number; covered: number }>(
        this.sql.apply,
        [part, distinct.map((e) => e.seq), distinct.map((e) => e.key), distinct.map((e) => e.delta)],
      );
      const { applied, covered } = rows[0]!;
      const watermark = await advanceWatermark(client, this.spec.kind, part);
      await this.hooks.at(`${this.spec.kind}.consumer.beforeCommit`, { part, events, pid: backendPid(client) });
      return { applied, covered, dup: events.length - applied - covered, watermark };
    });
  }

  /** Unprocessed events of a partition above its watermark, read without locks (overlap is absorbed). */
  async fetchPending(part: number, limit: number): Promise<CountEvent[]> {
    const { rows } = await this.pool.query<OutboxRow>(this.sql.fetchPending, [part, limit]);
    return rows.map(toEvent);
  }

  /** Events by sequence range, processed or not: how a transport redelivers. */
  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<CountEvent[]> {
    const { rows } = await this.pool.query<OutboxRow>(
      `SELECT ${this.sql.outboxColumns} FROM ${this.spec.outbox} o WHERE o.part = $1 AND o.seq BETWEEN $2 AND $3 ORDER BY o.seq`,
      [part, fromSeq, toSeq],
    );
    return rows.map(toEvent);
  }

  async pollOnce(parts: readonly number[], batchSize = 100): Promise<CounterStats> {
    const total = emptyCounterStats();
    for (const part of parts) {
      const events = await this.fetchPending(part, batchSize);
      if (events.length === 0) continue;
      const s = await this.applyBatch(events);
      total.applied += s.applied;
      total.covered += s.covered;
      total.dup += s.dup;
    }
    return total;
  }

  async drain(batchSize = 200): Promise<CounterStats> {
    const total = emptyCounterStats();
    await drainPartitions(this.pool, this.spec.kind, async (parts) => {
      const pass = await this.pollOnce(parts, batchSize);
      total.applied += pass.applied;
      total.covered += pass.covered;
      total.dup += pass.dup;
      return pass.applied + pass.covered + pass.dup;
    });
    return total;
  }

  /** A delivered event that is not in the outbox, or differs from its row, is refused before it touches a count. */
  private async requireOutboxMatch(client: PoolClient, part: number, events: readonly CountEvent[]): Promise<void> {
    const { rows } = await client.query<OutboxRow>(
      `SELECT ${this.sql.outboxColumns} FROM ${this.spec.outbox} o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])`,
      [part, events.map((e) => e.seq)],
    );
    const stored = new Map(rows.map((r) => [r.seq, toEvent(r)]));
    for (const e of events) {
      const s = stored.get(e.seq);
      if (!s || s.factId !== e.factId || s.key !== e.key || s.delta !== e.delta || s.version !== e.version) {
        throw new InvalidInputError("events", `event ${part}:${e.seq} ${s ? "does not match" : "is not in"} the outbox`);
      }
    }
  }
}
