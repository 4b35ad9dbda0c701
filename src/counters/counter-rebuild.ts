import type { Pool } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { LedgerError } from "../errors.ts";
import type { CounterSpec } from "./counter-spec.ts";

export class CounterRebuildInProgressError extends LedgerError {
  constructor(kind: string) {
    super("REBUILD_IN_PROGRESS", `another ${kind} rebuild is running; try again when it has finished`);
  }
}

export interface KeyDrift {
  key: string;
  oldN: number;
  newN: number;
  /** Distance of the derived side from the facts before the install, pending events not counted as drift. */
  drift: number;
}

export interface CounterRebuildReport {
  runId: number;
  snapshotSeqs: number[];
  keysChecked: number;
  drifted: KeyDrift[];
  totalAbsDrift: number;
}

const PAGE_SIZE = 500;

/**
 * The snapshot rebuild of chapter 32 (the like rebuild's algorithm, written once against a
 * CounterSpec). One REPEATABLE READ snapshot reads every partition's last seq S_p and the
 * counted facts per (key, partition) from spec.countedSql; each key is then installed in a
 * short transaction that locks its count rows in partition order, sets n = snapshot count +
 * events APPLIED above S_p and base_seq = S_p, so later deliveries of events <= S_p are
 * COVERED. The drift found is recorded in the spec's run and drift tables.
 */
export class CounterRebuild {
  constructor(
    private readonly pool: Pool,
    readonly spec: CounterSpec,
  ) {}

  async rebuild(): Promise<CounterRebuildReport> {
    const s = this.spec;
    const drifted: KeyDrift[] = [];
    let keysChecked = 0;
    const snapshotSeqs = await withTransaction(this.pool, async (snap) => {
      const { rows: lock } = await snap.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [s.rebuildLockKey]);
      if (!lock[0]!.ok) throw new CounterRebuildInProgressError(s.kind);
      const { rows: cfg } = await snap.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
      const partitions = cfg[0]!.partitions;
      const { rows: seqRows } = await snap.query<{ part: number; last: number }>(`SELECT part, last FROM ${s.sequence} ORDER BY part`);
      const seqs = Array.from({ length: partitions }, () => 0);
      for (const r of seqRows) seqs[r.part] = r.last;
      for (let after = ""; ; ) {
        const { rows: page } = await snap.query<{ key: string; counts: number[] }>(
          `SELECT k.key, array(SELECT coalesce(c.n, 0) FROM generate_series(0, $1::int - 1) AS p
                                 LEFT JOIN (${s.countedSql}) c ON c.key = k.key AND c.part = p ORDER BY p) AS counts
             FROM (${s.keysSql}) k WHERE k.key > $2 ORDER BY k.key LIMIT $3`,
          [partitions, after, PAGE_SIZE],
        );
        if (page.length === 0) break;
        for (const { key, counts } of page) {
          const d = await this.installKey(key, counts.map(Number), seqs);
          keysChecked++;
          if (d.drift !== 0) drifted.push(d);
        }
        after = page[page.length - 1]!.key;
      }
      return seqs;
    }, { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 });
    const totalAbsDrift = drifted.reduce((sum, d) => sum + Math.abs(d.drift), 0);
    const runId = await withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ run_id: number }>(
        `INSERT INTO ${s.rebuildRun} (snapshot_seqs, keys_checked, keys_drifted, total_abs_drift) VALUES ($1, $2, $3, $4) RETURNING run_id`,
        [snapshotSeqs, keysChecked, drifted.length, totalAbsDrift],
      );
      const id = rows[0]!.run_id;
      if (drifted.length > 0) {
        await client.query(
          `INSERT INTO ${s.rebuildDrift} (run_id, ${s.keyColumn}, old_n, new_n, drift)
           SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[])`,
          [id, drifted.map((d) => d.key), drifted.map((d) => d.oldN), drifted.map((d) => d.newN), drifted.map((d) => d.drift)],
        );
      }
      return id;
    });
    return { runId, snapshotSeqs, keysChecked, drifted, totalAbsDrift };
  }

  private async installKey(key: string, counts: number[], snapshotSeqs: number[]): Promise<KeyDrift> {
    const s = this.spec;
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO ${s.count} (${s.keyColumn}, part) SELECT $1, generate_series(0, $2::int - 1) ON CONFLICT DO NOTHING`,
        [key, snapshotSeqs.length],
      );
      await client.query(`SELECT part FROM ${s.count} WHERE ${s.keyColumn} = $1 ORDER BY part FOR UPDATE`, [key]);
      // Read after the locks: a consumer that committed meanwhile is visible to this statement.
      const { rows } = await client.query<{ part: number; n: number; base_seq: number; applied_after: number; pending_in_window: number }>(
        `SELECT c.part, c.n, c.base_seq,
                (SELECT coalesce(sum(o.delta), 0) FROM ${s.outbox} o JOIN ${s.processed} pe ON pe.part = o.part AND pe.seq = o.seq
                  WHERE o.${s.keyColumn} = c.${s.keyColumn} AND o.part = c.part AND o.seq > ($2::bigint[])[c.part + 1] AND pe.how = 'APPLIED')::bigint AS applied_after,
                (SELECT coalesce(sum(o.delta), 0) FROM ${s.outbox} o
                  WHERE o.${s.keyColumn} = c.${s.keyColumn} AND o.part = c.part
                    AND o.seq > greatest(c.base_seq, w.applied_upto) AND o.seq <= ($2::bigint[])[c.part + 1]
                    AND NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq))::bigint AS pending_in_window
           FROM ${s.count} c JOIN ${s.watermark} w ON w.part = c.part
          WHERE c.${s.keyColumn} = $1 ORDER BY c.part`,
        [key, snapshotSeqs],
      );
      let oldN = 0;
      let newN = 0;
      let drift = 0;
      for (const row of rows) {
        const snapSeq = snapshotSeqs[row.part]!;
        oldN += row.n;
        if (row.base_seq > snapSeq) {
          newN += row.n; // a newer rebuild's baseline; an older one would un-cover its events
          continue;
        }
        const n = (counts[row.part] ?? 0) + row.applied_after;
        drift += n - (row.n + row.pending_in_window);
        newN += n;
        await client.query(`UPDATE ${s.count} SET n = $3, base_seq = $4 WHERE ${s.keyColumn} = $1 AND part = $2`, [key, row.part, n, snapSeq]);
      }
      return { key, oldN, newN, drift };
    });
  }
}
