/**
 * A long-running loop around one pass of a consumer (like counter or follower projector).
 * State lives in the database (dedup keys and watermarks), so a worker killed at any point
 * loses nothing: the next one resumes from the watermark and the dedup key absorbs whatever
 * it redelivers. Any number of workers may serve the same partitions. `stop()` aborts the signal
 * the pass was given and waits for the pass to return: a consumer's pass lets the round it is
 * applying commit and takes no further round (pollPartitions).
 */
export interface PartitionWorkerOptions {
  /** How long to wait before polling again when a pass found nothing to do. */
  idleMs?: number;
  /**
   * A pass that handled fewer events than this is followed by the idle wait, as an empty one is
   * (default 1: only an empty pass). A loop that goes straight on after a pass of a few events
   * spends its round trips (a probe per partition, a transaction per batch) on those few: 20 loops
   * doing so at P = 16 cost the writers' machine five times the CPU of the writes (docs/write-path.md).
   * The wait adds at most idleMs to an event's delay, the bound an idle loop already has.
   */
  idleBelow?: number;
  /** Ceiling of the exponential backoff after failed passes (default 10 s). */
  maxBackoffMs?: number;
  /** Called with the error of every failed pass (for metrics); the loop backs off and goes on. */
  onError?: (err: unknown, worker: string) => void;
  /** Called once when passes start failing after a success (or at the start): one log line per outage, not one per attempt. */
  onFailing?: (err: unknown, worker: string) => void;
  /** Called once when a pass succeeds again, with how many passes failed and for how long. */
  onRecovered?: (worker: string, outage: { failedPasses: number; ms: number }) => void;
}

export class PartitionWorker {
  private running = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private stopping = new AbortController();
  passes = 0;
  processed = 0;
  /** Failed passes in a row; 0 while healthy. */
  failedInARow = 0;
  private failingSince = 0;

  constructor(
    readonly name: string,
    /** One pass; returns how many events it handled. `signal` aborts when stop() is called. */
    private readonly pass: (signal: AbortSignal) => Promise<number>,
    private readonly options: PartitionWorkerOptions = {},
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.stopping = new AbortController();
    this.loop = this.run();
  }

  /** Full jitter over an exponential ceiling: a down database is not polled in lockstep by every loop. */
  private backoffMs(): number {
    const ceiling = Math.min(
      this.options.maxBackoffMs ?? 10_000,
      (this.options.idleMs ?? 200) * 2 ** this.failedInARow,
    );
    return ceiling / 2 + (Math.random() * ceiling) / 2;
  }

  private async run(): Promise<void> {
    while (this.running) {
      let handled = 0;
      try {
        handled = await this.pass(this.stopping.signal);
        this.passes++;
        this.processed += handled;
        if (this.failedInARow > 0) {
          this.options.onRecovered?.(this.name, {
            failedPasses: this.failedInARow,
            ms: Date.now() - this.failingSince,
          });
          this.failedInARow = 0;
        }
      } catch (err) {
        if (this.failedInARow === 0) {
          this.failingSince = Date.now();
          this.options.onFailing?.(err, this.name);
        }
        this.failedInARow++;
        this.options.onError?.(err, this.name);
      }
      if (handled >= (this.options.idleBelow ?? 1) || !this.running) continue;
      const waitMs = this.failedInARow > 0 ? this.backoffMs() : (this.options.idleMs ?? 200);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, waitMs).unref();
      });
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    this.stopping.abort();
    this.wake?.();
    await this.loop;
  }
}
