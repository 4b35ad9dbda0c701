import type { Pool } from "../db/pool.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { addStats, emptyStats, LikeConsumer, type ConsumeStats } from "./like-consumer.ts";

export interface LikeWorkerOptions {
  /** Partitions this worker serves; all of them by default. Any number of workers may overlap. */
  partitions?: readonly number[];
  batchSize?: number;
  /** How long to wait before polling again when there was nothing to do. */
  idleMs?: number;
  onBatch?: (stats: ConsumeStats) => void;
}

/**
 * A long-running consumer loop. State lives in the database (processed_event and the
 * watermark), so a worker killed at any point loses nothing: the next one resumes from the
 * watermark and the dedup key absorbs whatever it redelivers. `stop()` lets the current
 * batch commit and then returns.
 */
export class LikeWorker {
  private running = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  readonly totals: ConsumeStats = emptyStats();

  constructor(
    private readonly pool: Pool,
    private readonly options: LikeWorkerOptions = {},
  ) {}

  async start(): Promise<void> {
    const all = await readPartitions(this.pool);
    const parts = this.options.partitions ?? Array.from({ length: all }, (_, p) => p);
    const consumer = new LikeConsumer(this.pool);
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        const pass = await consumer.pollOnce(parts, this.options.batchSize ?? 200);
        addStats(this.totals, pass);
        if (pass.applied + pass.covered + pass.dup > 0) {
          this.options.onBatch?.(pass);
          continue;
        }
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          setTimeout(resolve, this.options.idleMs ?? 200).unref();
        });
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }
}
