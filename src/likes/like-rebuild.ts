import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError, LedgerError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";

export class UnknownItemsError extends LedgerError {
  readonly itemIds: string[];
  constructor(itemIds: string[]) {
    super("ITEM_NOT_FOUND", `unknown item(s): ${itemIds.slice(0, 5).join(", ")}${itemIds.length > 5 ? ", ..." : ""}`);
    this.itemIds = itemIds;
  }
}

export class RebuildInProgressError extends LedgerError {
  constructor() {
    super("REBUILD_IN_PROGRESS", "another rebuild is running; try again when it has finished");
  }
}

/** Advisory lock key of the rebuild (an arbitrary constant: "likerbld" in ASCII). */
export const REBUILD_LOCK_KEY = 0x6c696b6572626c64n.toString();

/** What one RR snapshot says: per partition the last committed seq, per (item, partition) the liked facts. */
export interface RebuildSnapshot {
  partitions: number;
  /** snapshotSeqs[p] = like_seq.last of partition p in the snapshot. */
  snapshotSeqs: number[];
}

export interface ItemDrift {
  itemId: string;
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

export interface RebuildReport {
  runId: number;
  snapshotSeqs: number[];
  itemsChecked: number;
  drifted: ItemDrift[];
  totalAbsDrift: number;
}

const PAGE_SIZE = 500;

/**
 * Rebuild (chapter 32, "批量重算与在线增量"), partitioned. Step one reads, in one REPEATABLE
 * READ snapshot, every partition's last seq S_p and the liked facts per (item, partition):
 * since each partition's seq order is its commit order, that snapshot holds exactly the
 * effects of events 1..S_p of every partition. Step two installs one item at a time in a
 * short READ COMMITTED transaction that locks all of the item's count rows in partition
 * order and only then sums the events applied above S_p, so it neither double-counts what
 * the snapshot already holds nor loses what the consumer applied after it.
 */
export class LikeRebuild {
  private readonly hooks: Hooks;

  constructor(
    private readonly pool: Pool,
    options: { hooks?: Hooks } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
  }

  async rebuild(options: { items?: readonly string[] } = {}): Promise<RebuildReport> {
    if (options.items !== undefined && !Array.isArray(options.items)) {
      throw new InvalidInputError("items", "must be an array of item ids when given");
    }
    const items = options.items?.map((id) => validateId("itemId", id));
    const drifted: ItemDrift[] = [];
    let itemsChecked = 0;
    // The snapshot transaction stays open while items are installed on other connections,
    // so items are streamed page by page instead of held in memory all at once.
    const snapshot = await withTransaction(
      this.pool,
      async (snapshotClient) => {
        // One rebuild at a time: each holds a snapshot connection and needs a second one per
        // install, so unbounded concurrent rebuilds could starve the pool.
        const { rows: lock } = await snapshotClient.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [REBUILD_LOCK_KEY]);
        if (!lock[0]!.ok) throw new RebuildInProgressError();
        const header = await readSnapshotHeader(snapshotClient);
        if (items) {
          const { rows } = await snapshotClient.query<{ item_id: string }>(
            "SELECT i AS item_id FROM unnest($1::text[]) AS i WHERE NOT EXISTS (SELECT 1 FROM item WHERE item_id = i)",
            [items],
          );
          if (rows.length > 0) throw new UnknownItemsError(rows.map((r) => r.item_id));
        }
        await this.hooks.at("rebuild.afterSnapshot", { snapshotSeqs: header.snapshotSeqs });
        for (let after = ""; ; ) {
          const page = await readFactPage(snapshotClient, header.partitions, after, items);
          if (page.length === 0) break;
          for (const { itemId, counts } of page) {
            const drift = await this.installItem(itemId, counts, header);
            itemsChecked++;
            if (drift.drift !== 0) drifted.push(drift);
          }
          after = page[page.length - 1]!.itemId;
        }
        return header;
      },
      { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 },
    );
    const totalAbsDrift = drifted.reduce((sum, d) => sum + Math.abs(d.drift), 0);
    const runId = await recordRun(this.pool, snapshot.snapshotSeqs, itemsChecked, drifted, totalAbsDrift);
    return { runId, snapshotSeqs: snapshot.snapshotSeqs, itemsChecked, drifted, totalAbsDrift };
  }

  /** Installs the baseline of one item: counts[p] = liked facts of partition p at the snapshot. */
  async installItem(itemId: string, counts: number[], snapshot: RebuildSnapshot): Promise<ItemDrift> {
    return withTransaction(this.pool, async (client) => {
      await this.hooks.at("rebuild.beforeInstall", { itemId, pid: backendPid(client) });
      // Either statement may wait on a consumer that holds (or has just inserted) the row.
      await client.query(
        "INSERT INTO like_count (item_id, part) SELECT $1, generate_series(0, $2::int - 1) ON CONFLICT DO NOTHING",
        [itemId, snapshot.partitions],
      );
      await client.query("SELECT part FROM like_count WHERE item_id = $1 ORDER BY part FOR UPDATE", [itemId]);
      // Read only after the locks: a consumer that held a row and committed meanwhile is
      // visible to this new statement (READ COMMITTED), so its APPLIED events are summed.
      const { rows } = await client.query<{ part: number; n: number; base_seq: number; applied_after: number; pending_in_window: number }>(
        INSTALL_STATE_SQL,
        [itemId, snapshot.snapshotSeqs],
      );
      let oldN = 0;
      let newN = 0;
      let drift = 0;
      const skippedPartitions: number[] = [];
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
        await client.query("UPDATE like_count SET n = $3, base_seq = $4 WHERE item_id = $1 AND part = $2", [itemId, row.part, n, snapSeq]);
      }
      await this.hooks.at("rebuild.beforeCommit", { itemId });
      return { itemId, oldN, newN, drift, skippedPartitions };
    });
  }
}

/** Per count row of the item: events applied above the snapshot, and unprocessed events the new baseline covers. */
const INSTALL_STATE_SQL = `
  SELECT lc.part, lc.n, lc.base_seq,
         (SELECT coalesce(sum(o.delta), 0)
            FROM like_outbox o JOIN processed_event pe ON pe.part = o.part AND pe.seq = o.seq
           WHERE o.item_id = lc.item_id AND o.part = lc.part
             AND o.seq > ($2::bigint[])[lc.part + 1] AND pe.how = 'APPLIED')::bigint AS applied_after,
         (SELECT coalesce(sum(o.delta), 0)
            FROM like_outbox o
           WHERE o.item_id = lc.item_id AND o.part = lc.part
             AND o.seq > greatest(lc.base_seq, w.applied_upto) AND o.seq <= ($2::bigint[])[lc.part + 1]
             AND NOT EXISTS (SELECT 1 FROM processed_event pe WHERE pe.part = o.part AND pe.seq = o.seq))::bigint AS pending_in_window
    FROM like_count lc JOIN counter_watermark w ON w.part = lc.part
   WHERE lc.item_id = $1
   ORDER BY lc.part`;

export async function readSnapshotHeader(client: PoolClient): Promise<RebuildSnapshot> {
  const config = await client.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
  const partitions = config.rows[0]!.partitions;
  const seqs = await client.query<{ part: number; last: number }>("SELECT part, last FROM like_seq ORDER BY part");
  const snapshotSeqs = Array.from({ length: partitions }, () => 0);
  for (const row of seqs.rows) snapshotSeqs[row.part] = row.last;
  return { partitions, snapshotSeqs };
}

/** One page of items (keyset by item_id) with their liked facts per partition, read in the caller's snapshot. */
export async function readFactPage(
  client: PoolClient,
  partitions: number,
  after: string,
  items: readonly string[] | undefined,
): Promise<{ itemId: string; counts: number[] }[]> {
  const { rows } = await client.query<{ item_id: string; counts: number[] }>(
    `SELECT i.item_id,
            array(SELECT coalesce(c.n, 0)
                    FROM generate_series(0, $1::int - 1) AS p
                    LEFT JOIN (SELECT ledger_partition(f.user_id, $1) AS part, count(*) AS n
                                 FROM like_fact f
                                WHERE f.item_id = i.item_id AND f.liked
                                GROUP BY 1) c ON c.part = p
                   ORDER BY p) AS counts
       FROM item i
      WHERE i.item_id > $2 AND ($3::text[] IS NULL OR i.item_id = ANY ($3))
      ORDER BY i.item_id
      LIMIT $4`,
    [partitions, after, items ?? null, PAGE_SIZE],
  );
  return rows.map((r) => ({ itemId: r.item_id, counts: r.counts.map(Number) }));
}

async function recordRun(pool: Pool, snapshotSeqs: number[], itemsChecked: number, drifted: ItemDrift[], totalAbsDrift: number): Promise<number> {
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ run_id: number }>(
      `INSERT INTO like_rebuild_run (snapshot_seqs, items_checked, items_drifted, total_abs_drift)
       VALUES ($1, $2, $3, $4) RETURNING run_id`,
      [snapshotSeqs, itemsChecked, drifted.length, totalAbsDrift],
    );
    const runId = rows[0]!.run_id;
    if (drifted.length > 0) {
      await client.query(
        `INSERT INTO like_rebuild_drift (run_id, item_id, old_n, new_n, drift)
         SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[])`,
        [runId, drifted.map((d) => d.itemId), drifted.map((d) => d.oldN), drifted.map((d) => d.newN), drifted.map((d) => d.drift)],
      );
    }
    return runId;
  });
}
