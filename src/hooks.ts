/**
 * Named hook points let a test stop a transaction at an exact place (for example
 * "consumer.beforeCommit") and release it later, so interleavings are deterministic
 * without sleeping. In production no handler is registered and `at` resolves at once. Whether
 * a handler is registered is deliberately not asked anywhere: a hook point pauses the path
 * production runs and never selects another (docs/testing.md). The write functions' own points
 * are in SQL (the function ledger_hook, src/db/schema.sql).
 */
export type HookContext = Record<string, unknown>;
export type HookHandler = (context: HookContext) => void | Promise<void>;

export class Hooks {
  private readonly handlers = new Map<string, HookHandler>();

  on(name: string, handler: HookHandler): () => void {
    this.handlers.set(name, handler);
    return () => {
      if (this.handlers.get(name) === handler) this.handlers.delete(name);
    };
  }

  async at(name: string, context: HookContext = {}): Promise<void> {
    const handler = this.handlers.get(name);
    if (handler) await handler(context);
  }
}

/**
 * How long a test waits for someone to reach a gate. Reaching a hook point takes
 * milliseconds; when it does not happen at all (a repaired negative control that no longer
 * passes the point, a transaction blocked before it), the wait must fail with a message
 * rather than hang until the runner's per-test timeout.
 */
export const GATE_DEADLINE_MS = 30_000;

/**
 * A hook point that parks whoever reaches it until the test releases it. The test waits for
 * the arrival with `waitArrived`, which rejects after a deadline naming the gate.
 */
export class Gate {
  private releaseFn: (() => void) | undefined;
  private readonly released: Promise<void>;
  private arrivedFn: ((context: HookContext) => void) | undefined;
  private readonly arrived: Promise<HookContext>;

  /** `name` is the hook point the gate is registered at, used in the deadline's message. */
  constructor(readonly name: string) {
    this.released = new Promise((resolve) => (this.releaseFn = resolve));
    this.arrived = new Promise((resolve) => (this.arrivedFn = resolve));
  }

  /** The handler to register with Hooks.on: signals arrival, then waits for release. */
  readonly handler: HookHandler = async (context) => {
    this.arrivedFn?.(context);
    await this.released;
  };

  /** The context of the first arrival, or a rejection if nobody arrives within `ms`. */
  async waitArrived(ms = GATE_DEADLINE_MS): Promise<HookContext> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`gate ${this.name}: nobody reached it within ${ms} ms`)), ms);
    });
    try {
      return await Promise.race([this.arrived, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  release(): void {
    this.releaseFn?.();
  }
}
