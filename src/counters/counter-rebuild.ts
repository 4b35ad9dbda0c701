import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError, LedgerError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { assertSnapshotNotPruned } from "../db/retention-boundary.ts";
import type { CounterSpec } from "./counter-spec.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";

export class CounterRebuildInProgressError extends LedgerError {
  constructor(kind: string) {
    super("REBUILD_IN_PROGRESS", `another ${kind} rebuild is running; try again when it has finished`);
  }
}

/** Keys asked for by a rebuild that do not exist; carries them. */
export class UnknownCounterKeysError extends LedgerError {
  constructor(readonly keys: string[], code = "KEY_NOT_FOUND", what = "key") {
    super(code, `unknown ${what}(s): ${keys.slice(0, 5).join(", ")}${keys.length > 5 ? ", ..." : ""}`);
  }
}

/** What one RR snapshot says: the partition count and, per partition, the last committed seq. */
export interface CounterSnapshot {
  partitions: number;
  /** snapshotSeqs[p] = the sequence's last of partition p in the snapshot. */
  snapshotSeqs: number[];
}

export interface KeyDrift {
  key: string;
  oldN: number;
  newN: number;
  /**
   * How far the derived side was from the facts before the install, with events that were
   * merely pending (unprocessed, inside the new baseline) not counted as drift. Non-zero
   * means the count had been written wrongly, not just late.
   */
  drift: number;
  /** Partitions whose row already had a newer baseline and was left alone. */
  skippedPartitions: number[];
}

export interface CounterRebuildReport {
  runId: number;
  snapshotSeqs: number[];
  keysChecked: number;
  drifted: KeyDrift[];
  totalAbsDrift: number;
}

/** The most keys per page of the snapshot read; pacing sizes pages below it (at least MIN_PAGE_SIZE). */
const PAGE_SIZE = 500;
const MIN_PAGE_SIZE = 10;

/** The snapshot header, read in the caller's REPEATABLE READ transaction. */
export async function readCounterSnapshot(client: PoolClient, s: CounterSpec): Promise<CounterSnapshot> {
  const config = await client.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
  const partitions = config.rows[0]!.partitions;
  const seqs = await client.query<{ part: number; last: number }>(`SELECT part, last FROM ${s.sequence} ORDER BY part`);
  const snapshotSeqs = Array.from({ length: partitions }, () => 0);
  for (const row of seqs.rows) snapshotSeqs[row.part] = row.last;
  return { partitions, snapshotSeqs };
}

/**
 * One page of keys (keyset by key, from spec.keysSql, optionally only `keys`) with their
 * counted facts per partition (spec.countedSql), read in the caller's snapshot. The facts are
 * read for the page's keys at once: the key predicate reaches into countedSql's GROUP BY, so
 * each key's facts are one index range.
 */
export async function readCountedPage(
  client: PoolClient,
  s: CounterSpec,
  partitions: number,
  after: string,
  keys: readonly string[] | undefined,
  limit = PAGE_SIZE,
): Promise<{ key: string; counts: number[] }[]> {
  const { rows: page } = await client.query<{ key: string }>(
    `SELECT k.key FROM (${s.keysSql}) k
      WHERE k.key > $1 AND ($2::text[] IS NULL OR k.key = ANY ($2))
      ORDER BY k.key LIMIT $3`,
    [after, keys ?? null, limit],
  );
  if (page.length === 0) return [];
  const counts = new Map(page.map((r) => [r.key, Array.from({ length: partitions }, () => 0)]));
  const { rows } = await client.query<{ key: string; part: number; n: number }>(
    `SELECT c.key, c.part, c.n::bigint AS n FROM (${s.countedSql}) c WHERE c.key = ANY ($1::text[])`,
    [page.map((r) => r.key)],
  );
  for (const r of rows) counts.get(r.key)![r.part] = Number(r.n);
  return page.map((r) => ({ key: r.key, counts: counts.get(r.key)! }));
}

/**
 * The snapshot rebuild of chapter 32 ("批量重算与在线增量"), written once against a
 * CounterSpec. Step one reads, in one REPEATABLE READ snapshot, every partition's last seq S_p
 * and the counted facts per (key, partition) from spec.countedSql: since each partition's seq
 * order is its commit order, that snapshot holds exactly the effects of events 1..S_p. Step
 * two installs one key at a time in a short READ COMMITTED transaction that locks the key's
 * count rows in partition order and only then sums the events APPLIED above S_p, setting
 * n = snapshot count + those and base_seq = S_p, so later deliveries of events <= S_p are
 * COVERED: it neither double-counts what the snapshot holds nor loses what the consumer
 * applied after it. The drift found is recorded in the spec's run and drift tables.
 *
 * Hook points (prefixed with spec.hookPrefix): rebuild.afterSnapshot {snapshotSeqs},
 * rebuild.beforeInstall {key, pid}, rebuild.beforeCommit {key}; the context also names the
 * key by spec.keyName.
 *
 * Pacing (src/workers/pacer.ts): pages are sized to the pacing's budget from the last full page's
 * read, and after each page read and each install the rebuild rests in proportion to its
 * duration, so live writes and reads keep the CPU; the snapshot stays open meanwhile, which
 * changes nothing about what it holds.
 */
export class CounterRebuild {
  private readonly hooks: Hooks;
  private readonly unknownKeys: (keys: string[]) => Error;
  readonly pacer: Pacer;

  constructor(
    private readonly pool: Pool,
    readonly spec: CounterSpec,
    options: { hooks?: Hooks; unknownKeys?: (keys: string[]) => Error; pacing?: PacingOptions } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.pacer = new Pacer(options.pacing ?? DEFAULT_PACING, PAGE_SIZE, MIN_PAGE_SIZE);
    this.unknownKeys = options.unknownKeys ?? ((keys) => new UnknownCounterKeysError(keys));
  }

  async rebuild(options: { keys?: readonly string[] } = {}): Promise<CounterRebuildReport> {
    const s = this.spec;
    if (options.keys !== undefined && !Array.isArray(options.keys)) {
      throw new InvalidInputError(`${s.keyName}s`, `must be an array of ${s.keyName} values when given`);
    }
    const keys = options.keys?.map((k) => validateId(s.keyName, k));
    const drifted: KeyDrift[] = [];
    let keysChecked = 0;
    // The snapshot transaction stays open while keys are installed on other connections, so
    // keys are streamed page by page instead of held in memory all at once.
    const snapshot = await withTransaction(this.pool, async (snap) => {
      // One rebuild at a time: each holds a snapshot connection and needs a second one per
      // install, so unbounded concurrent rebuilds could starve the pool.
      const { rows: lock } = await snap.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [s.rebuildLockKey]);
      if (!lock[0]!.ok) throw new CounterRebuildInProgressError(s.kind);
      const header = await readCounterSnapshot(snap, s);
      await assertSnapshotNotPruned(this.pool, s.kind, header.snapshotSeqs);
      if (keys) {
        const { rows } = await snap.query<{ key: string }>(
          `SELECT x AS key FROM unnest($1::text[]) AS x WHERE NOT EXISTS (SELECT 1 FROM (${s.keysSql}) k WHERE k.key = x)`,
          [keys],
        );
        if (rows.length > 0) throw this.unknownKeys(rows.map((r) => r.key));
      }
      await this.hooks.at(`${s.hookPrefix}rebuild.afterSnapshot`, { snapshotSeqs: header.snapshotSeqs });
      for (let after = ""; ; ) {
        const size = this.pacer.size("page");
        const t0 = performance.now();
        const page = await readCountedPage(snap, s, header.partitions, after, keys, size);
        const readMs = performance.now() - t0;
        this.pacer.record("page", size, readMs, page.length === size);
        if (page.length === 0) break;
        await rest(this.pacer.restMs(readMs));
        for (const { key, counts } of page) {
          const t1 = performance.now();
          const d = await this.installKey(key, counts, header);
          keysChecked++;
          if (d.drift !== 0) drifted.push(d);
          await rest(this.pacer.restMs(performance.now() - t1));
        }
        after = page[page.length - 1]!.key;
      }
      return header;
    }, { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 });
    const totalAbsDrift = drifted.reduce((sum, d) => sum + Math.abs(d.drift), 0);
    const runId = await this.recordRun(snapshot.snapshotSeqs, keysChecked, drifted, totalAbsDrift);
    return { runId, snapshotSeqs: snapshot.snapshotSeqs, keysChecked, drifted, totalAbsDrift };
  }

  /** Installs the baseline of one key: counts[p] = counted facts of partition p at the snapshot. */
  async installKey(key: string, counts: number[], snapshot: CounterSnapshot): Promise<KeyDrift> {
    const s = this.spec;
    const named = { key, [s.keyName]: key };
    return withTransaction(this.pool, async (client) => {
      await this.hooks.at(`${s.hookPrefix}rebuild.beforeInstall`, { ...named, pid: backendPid(client) });
      // Either statement may wait on a consumer that holds (or has just inserted) the row.
      await client.query(
        `INSERT INTO ${s.count} (${s.keyColumn}, part) SELECT $1, generate_series(0, $2::int - 1) ON CONFLICT DO NOTHING`,
        [key, snapshot.partitions],
      );
      await client.query(`SELECT part FROM ${s.count} WHERE ${s.keyColumn} = $1 ORDER BY part FOR UPDATE`, [key]);
      // Read only after the locks: a consumer that held a row and committed meanwhile is
      // visible to this new statement (READ COMMITTED), so its APPLIED events are summed.
      const { rows } = await client.query<{ part: number; n: number; base_seq: number; applied_after: number; pending_in_window: number }>(
        installStateSql(s),
        [key, snapshot.snapshotSeqs],
      );
      let oldN = 0;
      let newN = 0;
      let drift = 0;
      const skippedPartitions: number[] = [];
      const installed: { part: number; n: number; baseSeq: number }[] = [];
      for (const row of rows) {
        const snapSeq = snapshot.snapshotSeqs[row.part]!;
        oldN += row.n;
        if (row.base_seq > snapSeq) {
          // A newer rebuild already installed this row; an older baseline would un-cover its events.
          skippedPartitions.push(row.part);
          newN += row.n;
          continue;
        }
        const n = (counts[row.part] ?? 0) + row.applied_after;
        drift += n - (row.n + row.pending_in_window);
        newN += n;
        installed.push({ part: row.part, n, baseSeq: snapSeq });
      }
      // One statement for every partition's row (locked above): the consumer waits on these rows
      // for one round trip instead of one per partition.
      await client.query(
        `UPDATE ${s.count} c SET n = x.n, base_seq = x.base_seq
           FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS x(part, n, base_seq)
          WHERE c.${s.keyColumn} = $1 AND c.part = x.part`,
        [key, installed.map((r) => r.part), installed.map((r) => r.n), installed.map((r) => r.baseSeq)],
      );
      await this.hooks.at(`${s.hookPrefix}rebuild.beforeCommit`, named);
      return { key, oldN, newN, drift, skippedPartitions };
    });
  }

  private async recordRun(snapshotSeqs: number[], keysChecked: number, drifted: KeyDrift[], totalAbsDrift: number): Promise<number> {
    const s = this.spec;
    const [checked, driftedColumn] = s.rebuildRunColumns;
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ run_id: number }>(
        `INSERT INTO ${s.rebuildRun} (snapshot_seqs, ${checked}, ${driftedColumn}, total_abs_drift) VALUES ($1, $2, $3, $4) RETURNING run_id`,
        [snapshotSeqs, keysChecked, drifted.length, totalAbsDrift],
      );
      const runId = rows[0]!.run_id;
      if (drifted.length > 0) {
        await client.query(
          `INSERT INTO ${s.rebuildDrift} (run_id, ${s.keyColumn}, old_n, new_n, drift)
           SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[])`,
          [runId, drifted.map((d) => d.key), drifted.map((d) => d.oldN), drifted.map((d) => d.newN), drifted.map((d) => d.drift)],
        );
      }
      return runId;
    });
  }
}

/** Per count row of the key: events applied above the snapshot, and unprocessed events the new baseline covers. */
function installStateSql(s: CounterSpec): string {
  return `
  SELECT c.part, c.n, c.base_seq,
         (SELECT coalesce(sum(o.delta), 0)
            FROM ${s.outbox} o JOIN ${s.processed} pe ON pe.part = o.part AND pe.seq = o.seq
           WHERE o.${s.keyColumn} = c.${s.keyColumn} AND o.part = c.part
             AND o.seq > ($2::bigint[])[c.part + 1] AND pe.how = 'APPLIED')::bigint AS applied_after,
         (SELECT coalesce(sum(o.delta), 0)
            FROM ${s.outbox} o
           WHERE o.${s.keyColumn} = c.${s.keyColumn} AND o.part = c.part
             AND o.seq > greatest(c.base_seq, w.applied_upto) AND o.seq <= ($2::bigint[])[c.part + 1]
             AND NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq))::bigint AS pending_in_window
    FROM ${s.count} c JOIN ${s.watermark} w ON w.part = c.part
   WHERE c.${s.keyColumn} = $1
   ORDER BY c.part`;
}
