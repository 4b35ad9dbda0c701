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
  constructor(
    readonly keys: string[],
    code = "KEY_NOT_FOUND",
    what = "key",
  ) {
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
/**
 * The most facts per chunk of a key counted in chunks (spec.chunk); pacing sizes chunks below it.
 * A key with more than the smallest chunk's facts is counted in chunks, the others with their page.
 */
export const CHUNK_ROWS = 50_000;
const MIN_CHUNK_ROWS = 1_000;

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
  const page = await readPageKeys(client, s, after, keys, limit);
  if (page.length === 0) return [];
  const counts = new Map(page.map((k) => [k, Array.from({ length: partitions }, () => 0)]));
  const { rows } = await client.query<{ key: string; part: number; n: number }>(
    `SELECT c.key, c.part, c.n::bigint AS n FROM (${s.countedSql}) c WHERE c.key = ANY ($1::text[])`,
    [page],
  );
  for (const r of rows) counts.get(r.key)![r.part] = Number(r.n);
  return page.map((k) => ({ key: k, counts: counts.get(k)! }));
}

/** The next page of keys after `after` (keyset by key, optionally only `keys`). */
async function readPageKeys(
  client: PoolClient,
  s: CounterSpec,
  after: string,
  keys: readonly string[] | undefined,
  limit: number,
): Promise<string[]> {
  const { rows } = await client.query<{ key: string }>(
    `SELECT k.key FROM (${s.keysSql}) k
      WHERE k.key > $1 AND ($2::text[] IS NULL OR k.key = ANY ($2))
      ORDER BY k.key LIMIT $3`,
    [after, keys ?? null, limit],
  );
  return rows.map((r) => r.key);
}

/** A page of keys: each with its counts, or null when it has more facts than the page counts (counted in chunks). */
type PageEntry = { key: string; counts: number[] | null };

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
 *
 * A hot key (a million likes of one item) is not one long statement: with spec.chunk, a page
 * counts at most the first `min chunk` facts of each key, and a key that has more is counted
 * chunk by chunk along its index (keyset cursor, chunks sized and rested by a pacer of their
 * own), each chunk a short statement IN THE SAME SNAPSHOT. That is the whole correctness
 * argument: every chunk sees the facts of events 1..S_p and nothing else, so the chunks are
 * disjoint ranges of one frozen index order and their sum is the key's count at the snapshot,
 * however live writes move facts meanwhile (a like committed after the snapshot, whose
 * changed_at would put it in a range already read, is invisible to every chunk and is summed
 * by the install from the events above S_p). Counting each chunk in a fresh snapshot instead
 * loses or double-counts exactly those moves (the negative control,
 * test/likes/negative-controls.ts ChunksOutsideSnapshotRebuild). The chunks take no lock but
 * the snapshot connection's AccessShare, so live writes never wait on them. Hook point:
 * rebuild.afterChunk {key, chunk, rows} after each chunk's read.
 */
export class CounterRebuild {
  private readonly hooks: Hooks;
  private readonly unknownKeys: (keys: string[]) => Error;
  readonly pacer: Pacer;
  /** Sizes the chunks of keys counted in chunks; its minimum is also the page's per-key cap. */
  readonly chunkPacer: Pacer;

  constructor(
    protected readonly pool: Pool,
    readonly spec: CounterSpec,
    options: {
      hooks?: Hooks;
      unknownKeys?: (keys: string[]) => Error;
      pacing?: PacingOptions;
      chunkRows?: number;
    } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.pacer = new Pacer(options.pacing ?? DEFAULT_PACING, PAGE_SIZE, MIN_PAGE_SIZE);
    const chunkRows = options.chunkRows ?? CHUNK_ROWS;
    if (!Number.isSafeInteger(chunkRows) || chunkRows < 1)
      throw new InvalidInputError("chunkRows", `must be a positive integer, got ${chunkRows}`);
    this.chunkPacer = new Pacer(options.pacing ?? DEFAULT_PACING, chunkRows, Math.min(MIN_CHUNK_ROWS, chunkRows));
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
    const snapshot = await withTransaction(
      this.pool,
      async (snap) => {
        // One rebuild at a time: each holds a snapshot connection and needs a second one per
        // install, so unbounded concurrent rebuilds could starve the pool.
        const { rows: lock } = await snap.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [
          s.rebuildLockKey,
        ]);
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
        for (let after = ""; ;) {
          const size = this.pacer.size("page");
          const t0 = performance.now();
          const page = await this.readPage(snap, header.partitions, after, keys, size);
          const readMs = performance.now() - t0;
          this.pacer.record("page", size, readMs, page.length === size);
          if (page.length === 0) break;
          await rest(this.pacer.restMs(readMs));
          for (const entry of page) {
            const key = entry.key;
            const counts = entry.counts ?? (await this.countInChunks(snap, key, header.partitions));
            const t1 = performance.now();
            const d = await this.installKey(key, counts, header);
            keysChecked++;
            if (d.drift !== 0) drifted.push(d);
            await rest(this.pacer.restMs(performance.now() - t1));
          }
          after = page[page.length - 1]!.key;
        }
        return header;
      },
      { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 },
    );
    const totalAbsDrift = drifted.reduce((sum, d) => sum + Math.abs(d.drift), 0);
    const runId = await this.recordRun(snapshot.snapshotSeqs, keysChecked, drifted, totalAbsDrift);
    return { runId, snapshotSeqs: snapshot.snapshotSeqs, keysChecked, drifted, totalAbsDrift };
  }

  /** One page of keys with their counts, read in the snapshot; with spec.chunk, a key above the cap gets null. */
  private async readPage(
    snap: PoolClient,
    partitions: number,
    after: string,
    keys: readonly string[] | undefined,
    size: number,
  ): Promise<PageEntry[]> {
    const chunk = this.spec.chunk;
    if (!chunk) return readCountedPage(snap, this.spec, partitions, after, keys, size);
    const page = await readPageKeys(snap, this.spec, after, keys, size);
    if (page.length === 0) return [];
    const cap = this.chunkPacer.minSize;
    const counts = new Map(page.map((k) => [k, Array.from({ length: partitions }, () => 0)]));
    const { rows } = await snap.query<{ key: string; part: number; n: string }>(chunk.cappedSql, [page, cap]);
    for (const r of rows) counts.get(r.key)![r.part] = Number(r.n);
    // A key whose first `cap` facts were all there was may have more: counted in chunks instead.
    return page.map((key) => ({
      key,
      counts: counts.get(key)!.reduce((a, b) => a + b, 0) >= cap ? null : counts.get(key)!,
    }));
  }

  /** One key's counted facts per partition, chunk by chunk along spec.chunk's cursor, in the snapshot `snap`. */
  private async countInChunks(snap: PoolClient, key: string, partitions: number): Promise<number[]> {
    const counts = Array.from({ length: partitions }, () => 0);
    let cursor: readonly string[] = this.spec.chunk!.start;
    for (let chunk = 0; ; chunk++) {
      const size = this.chunkPacer.size("chunk");
      const t0 = performance.now();
      const { rows } = await this.readChunk(snap, key, cursor, size);
      const ms = performance.now() - t0;
      const read = Number(rows[0]?.rows ?? 0);
      this.chunkPacer.record("chunk", size, ms, read === size);
      for (const r of rows) counts[r.part]! += Number(r.n);
      await this.hooks.at(`${this.spec.hookPrefix}rebuild.afterChunk`, {
        key,
        [this.spec.keyName]: key,
        chunk,
        rows: read,
      });
      if (read < size) return counts;
      cursor = rows[0]!.last;
      await rest(this.chunkPacer.restMs(ms));
    }
  }

  /** One chunk of a key's facts after `cursor`, at most `limit`: per partition (part, n), with the chunk's last cursor and size. */
  protected readChunk(snap: PoolClient, key: string, cursor: readonly string[], limit: number) {
    return snap.query<{ part: number; n: string; last: string[]; rows: string }>(this.spec.chunk!.chunkSql, [
      key,
      cursor,
      limit,
    ]);
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
      const { rows } = await client.query<{
        part: number;
        n: number;
        base_seq: number;
        applied_after: number;
        pending_in_window: number;
      }>(installStateSql(s), [key, snapshot.snapshotSeqs]);
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

  private async recordRun(
    snapshotSeqs: number[],
    keysChecked: number,
    drifted: KeyDrift[],
    totalAbsDrift: number,
  ): Promise<number> {
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
          [
            runId,
            drifted.map((d) => d.key),
            drifted.map((d) => d.oldN),
            drifted.map((d) => d.newN),
            drifted.map((d) => d.drift),
          ],
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
