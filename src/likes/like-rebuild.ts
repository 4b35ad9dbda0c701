import type { Pool, PoolClient } from "../db/pool.ts";
import {
  CounterRebuild,
  CounterRebuildInProgressError,
  readCountedPage,
  readCounterSnapshot,
  type CounterSnapshot,
  type KeyDrift,
} from "../counters/counter-rebuild.ts";
import { InvalidInputError, LedgerError } from "../errors.ts";
import type { Hooks } from "../hooks.ts";
import type { PacingOptions } from "../workers/pacer.ts";
import { LIKE_COUNTER } from "./like-spec.ts";

export class UnknownItemsError extends LedgerError {
  readonly itemIds: string[];
  constructor(itemIds: string[]) {
    super("ITEM_NOT_FOUND", `unknown item(s): ${itemIds.slice(0, 5).join(", ")}${itemIds.length > 5 ? ", ..." : ""}`);
    this.itemIds = itemIds;
  }
}

/** A second rebuild while one runs (the shared error, under the name the like code always used). */
export const RebuildInProgressError = CounterRebuildInProgressError;
export type RebuildInProgressError = CounterRebuildInProgressError;

/** Advisory lock key of the like rebuild (also taken by the dedup-key prune, src/retention/retention.ts). */
export const REBUILD_LOCK_KEY = LIKE_COUNTER.rebuildLockKey;

export type RebuildSnapshot = CounterSnapshot;

export interface ItemDrift {
  itemId: string;
  oldN: number;
  newN: number;
  /** Distance from the facts before the install, pending events not counted (KeyDrift.drift). */
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

function toItemDrift(d: KeyDrift): ItemDrift {
  return { itemId: d.key, oldN: d.oldN, newN: d.newN, drift: d.drift, skippedPartitions: d.skippedPartitions };
}

/**
 * The chapter-32 rebuild of like_count: the shared CounterRebuild (src/counters) on
 * LIKE_COUNTER, reporting in items; an item with many likes is counted in chunks along
 * like_fact_likers. Hook points: rebuild.afterSnapshot, rebuild.afterChunk {itemId, chunk, rows},
 * rebuild.beforeInstall {itemId, pid}, rebuild.beforeCommit {itemId}.
 */
export class LikeRebuild {
  private readonly counter: CounterRebuild;

  /** chunkRows: the most facts per chunk of a hot item (CHUNK_ROWS by default; tests make it small). */
  constructor(pool: Pool, options: { hooks?: Hooks; pacing?: PacingOptions; chunkRows?: number } = {}) {
    this.counter = new CounterRebuild(pool, LIKE_COUNTER, {
      ...options,
      unknownKeys: (keys) => new UnknownItemsError(keys),
    });
  }

  async rebuild(options: { items?: readonly string[] } = {}): Promise<RebuildReport> {
    if (options.items !== undefined && !Array.isArray(options.items)) {
      throw new InvalidInputError("items", "must be an array of item ids when given");
    }
    const r = await this.counter.rebuild(options.items ? { keys: options.items } : {});
    return {
      runId: r.runId,
      snapshotSeqs: r.snapshotSeqs,
      itemsChecked: r.keysChecked,
      drifted: r.drifted.map(toItemDrift),
      totalAbsDrift: r.totalAbsDrift,
    };
  }

  /** Installs the baseline of one item: counts[p] = liked facts of partition p at the snapshot. */
  async installItem(itemId: string, counts: number[], snapshot: RebuildSnapshot): Promise<ItemDrift> {
    return toItemDrift(await this.counter.installKey(itemId, counts, snapshot));
  }
}

/** Partitions and per partition like_seq.last, read in the caller's snapshot. */
export function readSnapshotHeader(client: PoolClient): Promise<RebuildSnapshot> {
  return readCounterSnapshot(client, LIKE_COUNTER);
}

/** One page of items (keyset by item_id) with their liked facts per partition, read in the caller's snapshot. */
export async function readFactPage(
  client: PoolClient,
  partitions: number,
  after: string,
  items: readonly string[] | undefined,
): Promise<{ itemId: string; counts: number[] }[]> {
  return (await readCountedPage(client, LIKE_COUNTER, partitions, after, items)).map((r) => ({
    itemId: r.key,
    counts: r.counts,
  }));
}
