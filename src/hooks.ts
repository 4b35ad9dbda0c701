/**
 * Named hook points let a test stop a transaction at an exact place (for example
 * "consumer.beforeCommit") and release it later, so interleavings are deterministic
 * without sleeping. In production no handler is registered and `at` resolves at once.
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

  /** Whether a handler is registered at `name` (a caller may then take a path that can pause there). */
  has(name: string): boolean {
    return this.handlers.has(name);
  }

  async at(name: string, context: HookContext = {}): Promise<void> {
    const handler = this.handlers.get(name);
    if (handler) await handler(context);
  }
}

/** A hook point that parks whoever reaches it until the test releases it. */
export class Gate {
  private releaseFn: (() => void) | undefined;
  private readonly released: Promise<void>;
  private arrivedFn: ((context: HookContext) => void) | undefined;
  readonly arrived: Promise<HookContext>;

  constructor() {
    this.released = new Promise((resolve) => (this.releaseFn = resolve));
    this.arrived = new Promise((resolve) => (this.arrivedFn = resolve));
  }

  /** The handler to register with Hooks.on: signals arrival, then waits for release. */
  readonly handler: HookHandler = async (context) => {
    this.arrivedFn?.(context);
    await this.released;
  };

  release(): void {
    this.releaseFn?.();
  }
}
