import {
  addTally,
  drainBatches,
  applyEachBatch,
  inPartitionBatch,
  partitionOfBatch,
  pollPartitions,
  CONSUMER_BATCH,
} from "../counters/partition-batch.ts";
import { fetchPendingSql, type WatermarkTables } from "../counters/watermark.ts";
import type { Pool, PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import type { Hooks } from "../hooks.ts";
import type { RelationEvent, RelationState } from "./types.ts";

export type Verdict = "applied" | "stale" | "dup";
export type VerdictCounts = Record<Verdict, number>;

export function emptyVerdicts(): VerdictCounts {
  return { applied: 0, stale: 0, dup: 0 };
}

export function addVerdicts(into: VerdictCounts, from: VerdictCounts): VerdictCounts {
  return addTally(into, from);
}

/** The follower projection's sequence, dedup keys and watermark (src/counters/watermark.ts). */
export const RELATION_WATERMARK: WatermarkTables = {
  sequence: "event_seq",
  seen: "proj_seen",
  watermark: "proj_watermark",
};

const FETCH_PENDING_SQL = fetchPendingSql(
  "relation_event",
  "o.part, o.seq, o.follower, o.followee, o.state, o.version, o.created_at",
  RELATION_WATERMARK,
);

interface EventRow {
  part: number;
  seq: number;
  follower: string;
  followee: string;
  state: RelationState;
  version: number;
  created_at: Date;
}

export function toRelationEvent(row: EventRow): RelationEvent {
  return {
    part: row.part,
    seq: row.seq,
    follower: row.follower,
    followee: row.followee,
    state: row.state,
    version: row.version,
    createdAt: row.created_at,
  };
}

/** How one event changes the projection; the naive variant lives in test/relations/negative-controls.ts. */
export type ProjectStep = (client: PoolClient, event: RelationEvent) => Promise<Verdict>;

/**
 * Events carry the pair's target state, so order matters (unlike likes): the projection keeps
 * the larger version, and the count moves by (new is ACTIVE) - (replaced is ACTIVE), derived
 * from the state actually replaced. proj_seen only feeds the contiguous watermark.
 */
export const projectVersioned: ProjectStep = async (client, e) => {
  const fresh = await client.query("INSERT INTO proj_seen (part, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING", [
    e.part,
    e.seq,
  ]);
  if (fresh.rowCount === 0) return "dup";
  await client.query(
    `INSERT INTO proj_follower (followee, follower, state, version, since) VALUES ($1, $2, 'REMOVED', 0, $3)
     ON CONFLICT DO NOTHING`,
    [e.followee, e.follower, e.createdAt],
  );
  const { rows } = await client.query<{ state: RelationState; version: number }>(
    "SELECT state, version FROM proj_follower WHERE followee = $1 AND follower = $2 FOR UPDATE",
    [e.followee, e.follower],
  );
  const old = rows[0]!;
  if (e.version <= old.version) return "stale";
  await client.query(
    "UPDATE proj_follower SET state = $3, version = $4, since = $5 WHERE followee = $1 AND follower = $2",
    [e.followee, e.follower, e.state, e.version, e.createdAt],
  );
  const delta = (e.state === "ACTIVE" ? 1 : 0) - (old.state === "ACTIVE" ? 1 : 0);
  if (delta !== 0) {
    await client.query(
      `INSERT INTO proj_count (followee, n) VALUES ($1, $2)
       ON CONFLICT (followee) DO UPDATE SET n = proj_count.n + EXCLUDED.n`,
      [e.followee, delta],
    );
  }
  return "applied";
};

/**
 * The batch form of projectVersioned, one statement for the whole batch (what the projector
 * runs unless a test supplies its own step). It gives every event the verdict the event-by-event
 * loop gives it when it walks the batch in (followee, follower, arrival) order:
 *  - dup: the seq is at or below the partition's watermark (contiguous, so already projected;
 *    proj_seen keys below it are not needed and may be pruned), or already in proj_seen, or a
 *    later copy of a seq earlier in the batch;
 *  - applied: its version is above both the stored version of its pair and every earlier fresh
 *    event of the pair in the batch; stale otherwise.
 * Each pair ends at its highest applied version (the last one the loop would write), and each
 * followee's count moves by the sum over its pairs of (final is ACTIVE) - (stored was ACTIVE).
 * The stored rows are read in the statement's snapshot, taken after the watermark lock was
 * granted, and only projectors of this partition (which hold that lock) write them.
 */
async function projectBatchVersioned(
  client: PoolClient,
  part: number,
  events: readonly RelationEvent[],
): Promise<Verdict[]> {
  const { rows } = await client.query<{ ord: number; applied: boolean }>({
    name: "relation_project_batch",
    text: `WITH ev AS (
       SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[])
                WITH ORDINALITY AS e(seq, follower, followee, state, version, created_at, ord)
        WHERE e.seq > (SELECT applied_upto FROM proj_watermark WHERE part = $1)),
     fresh AS (
       INSERT INTO proj_seen (part, seq) SELECT DISTINCT $1::int, seq FROM ev ORDER BY 2
       ON CONFLICT DO NOTHING
       RETURNING seq),
     first_copy AS (
       SELECT DISTINCT ON (ev.seq) ev.* FROM ev JOIN fresh USING (seq) ORDER BY ev.seq, ev.ord),
     judged AS (
       SELECT f.*, coalesce(pf.state = 'ACTIVE', false) AS was_active,
              f.version > greatest(coalesce(pf.version, 0), coalesce(max(f.version) OVER (
                PARTITION BY f.followee, f.follower ORDER BY f.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS applied
         FROM first_copy f
         LEFT JOIN proj_follower pf ON pf.followee = f.followee AND pf.follower = f.follower),
     final AS (
       SELECT DISTINCT ON (followee, follower) followee, follower, state, version, created_at,
              (state = 'ACTIVE')::int - was_active::int AS delta
         FROM judged WHERE applied ORDER BY followee, follower, version DESC),
     projected AS (  -- runs to completion although nothing reads it (data-modifying CTE)
       INSERT INTO proj_follower (followee, follower, state, version, since)
       SELECT followee, follower, state, version, created_at FROM final ORDER BY followee, follower
       ON CONFLICT (followee, follower) DO UPDATE
          SET state = EXCLUDED.state, version = EXCLUDED.version, since = EXCLUDED.since
       RETURNING 1),
     counted AS (
       INSERT INTO proj_count (followee, n)
       SELECT followee, sum(delta) FROM final GROUP BY followee HAVING sum(delta) <> 0 ORDER BY followee
       ON CONFLICT (followee) DO UPDATE SET n = proj_count.n + EXCLUDED.n
       RETURNING 1)
     SELECT ord::int, applied FROM judged`,
    values: [
      part,
      events.map((e) => e.seq),
      events.map((e) => e.follower),
      events.map((e) => e.followee),
      events.map((e) => e.state),
      events.map((e) => e.version),
      events.map((e) => e.createdAt),
    ],
  });
  const verdicts: Verdict[] = events.map(() => "dup");
  for (const { ord, applied } of rows) verdicts[ord - 1] = applied ? "applied" : "stale";
  return verdicts;
}

/**
 * Applies relation events to the follower projection. A batch is one transaction on one
 * partition that first locks the partition's watermark row: workers of one partition take
 * turns, workers of different partitions touch disjoint rows. Every statement after the lock
 * sees every proj_seen row committed by the worker before.
 */
export class RelationProjector {
  constructor(
    private readonly pool: Pool,
    /** Without `step`, a batch is projected by one statement (projectBatchVersioned). */
    private readonly options: { hooks?: Hooks; step?: ProjectStep } = {},
  ) {}

  /**
   * A redelivered event at or below the retention floor is `expired` (its row is pruned; it is
   * below the watermark, so a duplicate): verdict dup, touching nothing (docs/retention.md).
   */
  async applyBatch(
    events: readonly RelationEvent[],
  ): Promise<VerdictCounts & { verdicts: Verdict[]; watermark: number; expired: number }> {
    return this.applyEvents(events, true);
  }

  /**
   * Applies a batch that fetchPending read from relation_event itself: its rows never change (a
   * prune deletes only rows at or below the watermark, duplicates to the apply), so they are not
   * checked against it again. Everything else, the hook point included, is applyBatch's path.
   */
  async applyFetched(
    events: readonly RelationEvent[],
  ): Promise<VerdictCounts & { verdicts: Verdict[]; watermark: number; expired: number }> {
    return this.applyEvents(events, false);
  }
  /**
   * A round (a batch per partition) applied batch by batch, each in a transaction of its own: the projection's rows are
   * keyed by account, and events of any partition touch an account's rows, so
   * one transaction over several partitions would lock them partition by partition and two could wait
   * for each other (docs/write-path.md, "The consumers' round").
   */
  async applyRound(batches: readonly (readonly RelationEvent[])[]): Promise<VerdictCounts> {
    return applyEachBatch(batches, emptyVerdicts, (events) => this.applyFetched(events));
  }

  private async applyEvents(
    events: readonly RelationEvent[],
    delivered: boolean,
  ): Promise<VerdictCounts & { verdicts: Verdict[]; watermark: number; expired: number }> {
    const part = partitionOfBatch(events);
    const step = this.options.step;
    const order = events
      .map((e, i) => ({ e, i }))
      .sort((x, y) =>
        x.e.followee < y.e.followee
          ? -1
          : x.e.followee > y.e.followee
            ? 1
            : x.e.follower < y.e.follower
              ? -1
              : x.e.follower > y.e.follower
                ? 1
                : x.i - y.i,
      );
    // Projectors of one partition take turns (inPartitionBatch locks the watermark first), as
    // like consumers do. Locking the watermark last would let two of them take proj_seen keys,
    // proj_follower rows and proj_count rows in different orders and deadlock (a review found
    // and reproduced it).
    return inPartitionBatch(
      this.pool,
      RELATION_WATERMARK,
      part,
      async (client) => {
        const floor = delivered ? await requireEventMatch(client, part, events) : 0;
        const kept = events.map((e, i) => ({ e, i })).filter(({ e }) => e.seq > floor);
        const verdicts: Verdict[] = events.map(() => "dup");
        if (step) {
          // A supplied step (a test's, or a negative control) runs event by event.
          for (const { e, i } of order) if (e.seq > floor) verdicts[i] = await step(client, e);
        } else if (kept.length > 0) {
          const projected = await projectBatchVersioned(
            client,
            part,
            kept.map(({ e }) => e),
          );
          kept.forEach(({ i }, k) => {
            verdicts[i] = projected[k]!;
          });
        }
        const counts = emptyVerdicts();
        for (const v of verdicts) counts[v]++;
        return { ...counts, verdicts, expired: events.length - kept.length };
      },
      async (pid) => this.options.hooks?.at("projector.beforeCommit", { part, events, pid }),
    );
  }

  /** Up to `limit` unprocessed events above the watermark and above `after` (the last seq of a batch being applied). */
  async fetchPending(part: number, limit: number, after = 0): Promise<RelationEvent[]> {
    const { rows } = await this.pool.query<EventRow>({
      name: "relation_fetch_pending",
      text: FETCH_PENDING_SQL,
      values: [part, limit, after],
    });
    return rows.map(toRelationEvent);
  }

  async fetchRange(part: number, fromSeq: number, toSeq: number): Promise<RelationEvent[]> {
    const { rows } = await this.pool.query<EventRow>(
      `SELECT part, seq, follower, followee, state, version, created_at FROM relation_event
        WHERE part = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`,
      [part, fromSeq, toSeq],
    );
    return rows.map(toRelationEvent);
  }

  async pollOnce(parts: readonly number[], batchSize = 100, signal?: AbortSignal): Promise<VerdictCounts> {
    return pollPartitions(this, emptyVerdicts, parts, batchSize, signal);
  }

  /** Projects until every partition's watermark has reached its sequence. */
  async drain(batchSize = CONSUMER_BATCH): Promise<VerdictCounts> {
    return drainBatches(this.pool, RELATION_WATERMARK, "relations", this, emptyVerdicts, batchSize);
  }
}

/**
 * A transport carries copies; relation_event is the truth. Unknown or altered events are
 * refused. Returns the retention floor, read in the rows' statement: events at or below it are
 * pruned and not checked.
 */
async function requireEventMatch(client: PoolClient, part: number, events: readonly RelationEvent[]): Promise<number> {
  const { rows } = await client.query<EventRow & { floor: number }>(
    `SELECT f.floor, e.part, e.seq, e.follower, e.followee, e.state, e.version, e.created_at
       FROM (SELECT coalesce((SELECT pruned_upto FROM retention_floor WHERE kind = 'relations' AND part = $1), 0) AS floor) f
       LEFT JOIN relation_event e ON e.part = $1 AND e.seq = ANY ($2::bigint[])`,
    [part, events.map((e) => e.seq)],
  );
  const floor = rows[0]!.floor;
  const stored = new Map(rows.filter((r) => r.seq !== null).map((r) => [r.seq, r]));
  for (const e of events) {
    if (e.seq <= floor) continue;
    const s = stored.get(e.seq);
    if (
      !s ||
      s.follower !== e.follower ||
      s.followee !== e.followee ||
      s.state !== e.state ||
      s.version !== e.version
    ) {
      throw new InvalidInputError(
        "events",
        `relation event ${part}:${e.seq} ${s ? "does not match" : "is not in"} relation_event`,
      );
    }
  }
  return floor;
}
