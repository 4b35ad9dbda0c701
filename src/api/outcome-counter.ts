import client from "prom-client";

/**
 * ledger_operation_outcomes_total{operation,outcome} (CHANGED / NOOP / REJECTED per operation:
 * CHANGED over all is seed 004's "unique insert rate"), counted per write in plain numbers by
 * operation and outcome and added to prom-client's Counter when the registry or `get()` reads it
 * (its collect). prom-client's `inc` hashes and validates a labels object on every call: ~1 % of
 * the server's samples per HTTP like. The exposition is the Counter's own, so it is unchanged.
 */
export class OutcomeCounter {
  private readonly pending = new Map<string, Map<string, number>>();
  private readonly counter: client.Counter<"operation" | "outcome">;

  constructor(registry: client.Registry) {
    const pending = this.pending;
    this.counter = new client.Counter({
      name: "ledger_operation_outcomes_total",
      help: "Write outcomes per operation",
      labelNames: ["operation", "outcome"],
      registers: [registry],
      collect() {
        for (const [operation, outcomes] of pending) {
          for (const [outcome, n] of outcomes) {
            if (n === 0) continue;
            this.inc({ operation, outcome }, n);
            outcomes.set(outcome, 0);
          }
        }
      },
    });
  }

  inc(labels: { operation: string; outcome: string }): void {
    let outcomes = this.pending.get(labels.operation);
    if (!outcomes) this.pending.set(labels.operation, (outcomes = new Map()));
    outcomes.set(labels.outcome, (outcomes.get(labels.outcome) ?? 0) + 1);
  }

  /** The Counter's values (pending counts added first), as prom-client's `get()`. */
  get(): ReturnType<client.Counter["get"]> {
    return this.counter.get();
  }
}
