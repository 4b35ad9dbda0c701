/**
 * Group commit, the batching writer likes and relations share (one per service, for every
 * partition: docs/write-path.md, "One write path"): writes that arrive while the database is
 * busy go together, as one statement and one commit. A write is sent at once when fewer than `maxInFlight` batches are in flight
 * (so an idle service adds no wait, and there is no timer); otherwise it queues, and the queue
 * goes as the next batch (at most `maxBatch` writes) when a batch returns. `submit` resolves
 * with the write's own answer once its batch has committed, or rejects with the batch's error.
 */
export interface GroupCommitOptions {
  /** Most writes per batch. */
  maxBatch: number;
  /** Most batches in flight at once. */
  maxInFlight: number;
}

/** Runs one batch; resolves with one answer per input, in input order, after its commit. */
export type RunBatch<I, O> = (inputs: readonly I[]) => Promise<readonly O[]>;

interface Waiting<I, O> {
  input: I;
  resolve: (output: O) => void;
  reject: (err: unknown) => void;
}

export class GroupCommit<I, O> {
  private readonly queue: Waiting<I, O>[] = [];
  private inFlight = 0;
  /** Batches sent and writes in them, for the bench and the tests' notes. */
  readonly stats = { batches: 0, writes: 0, largest: 0 };

  constructor(
    private readonly run: RunBatch<I, O>,
    private readonly options: GroupCommitOptions,
  ) {
    if (!Number.isSafeInteger(options.maxBatch) || options.maxBatch < 1)
      throw new RangeError("maxBatch must be a positive integer");
    if (!Number.isSafeInteger(options.maxInFlight) || options.maxInFlight < 1)
      throw new RangeError("maxInFlight must be a positive integer");
  }

  submit(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ input, resolve, reject });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      this.stats.batches++;
      this.stats.writes += batch.length;
      this.stats.largest = Math.max(this.stats.largest, batch.length);
      void this.send(batch);
    }
  }

  private async send(batch: Waiting<I, O>[]): Promise<void> {
    try {
      const outputs = await this.run(batch.map((w) => w.input));
      if (outputs.length !== batch.length)
        throw new Error(`a batch of ${batch.length} writes returned ${outputs.length} answers`);
      batch.forEach((w, i) => w.resolve(outputs[i]!));
    } catch (err) {
      for (const w of batch) w.reject(err);
    } finally {
      this.inFlight--;
      this.dispatch();
    }
  }
}
