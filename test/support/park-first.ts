import type { HookContext, HookHandler } from "../../src/hooks.ts";
import { withDeadline } from "./line-child.ts";

/**
 * Parks the first transaction that reaches a hook point after `arm()` and lets every other
 * arrival pass: how a crash test holds exactly one writer (or one consumer batch) open and
 * uncommitted while the other loops keep running. (A Gate parks every arrival.)
 */
export class ParkFirst {
  private armed = false;
  private taken = false;
  private arrive!: (context: HookContext) => void;
  private releaseParked!: () => void;
  private readonly arrival = new Promise<HookContext>((resolve) => (this.arrive = resolve));
  private readonly released = new Promise<void>((resolve) => (this.releaseParked = resolve));

  /** `name` is the hook point it is registered at, used in the deadline's message. */
  constructor(readonly name: string) {}

  arm(): void {
    this.armed = true;
  }

  readonly handler: HookHandler = async (context) => {
    if (!this.armed || this.taken) return;
    this.taken = true;
    this.arrive(context);
    await this.released;
  };

  /** The parked transaction's hook context, once one is parked; rejects after `ms`. */
  parked(ms = 30_000): Promise<HookContext> {
    return withDeadline(this.arrival, ms, () => `nobody was parked at ${this.name}`);
  }

  release(): void {
    this.releaseParked();
  }
}
