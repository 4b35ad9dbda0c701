/**
 * A long-running loop around one pass of a consumer (like counter or follower projector).
 * State lives in the database (dedup keys and watermarks), so a worker killed at any point
 * loses nothing: the next one resumes from the watermark and the dedup key absorbs whatever
 * it redelivers. Any number of workers may serve the same partitions. `stop()` lets the
 * current batch commit and then returns.
 */
export interface PartitionWorkerOptions {
  /** How long to wait before polling again when a pass found nothing to do. */
  idleMs?: number;
  /** Called with the error of a failed pass and the worker's name; the loop waits idleMs and goes on. */
  onError?: (err: unknown, worker: string) => void;
}

export class PartitionWorker {
  private running = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  passes = 0;
  processed = 0;

  constructor(
    readonly name: string,
    /** One pass; returns how many events it handled. */
    private readonly pass: () => Promise<number>,
    private readonly options: PartitionWorkerOptions = {},
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      let handled = 0;
      try {
        handled = await this.pass();
        this.passes++;
        this.processed += handled;
      } catch (err) {
        this.options.onError?.(err, this.name);
      }
      if (handled > 0 || !this.running) continue;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, this.options.idleMs ?? 200).unref();
      });
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }
}
