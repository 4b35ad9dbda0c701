import type { ClusterExit, EmbeddedCluster } from "../db/embedded-cluster.ts";
import type { DatabaseHealth } from "../api/routes/health.ts";

export type DatabaseState = DatabaseHealth["state"];

export interface SupervisorOptions {
  /** Start attempts allowed within `windowMs`; 0 means never restart: fail at the first death. */
  maxRestarts: number;
  windowMs?: number;
  /** Delay before the n-th attempt of one outage (n from 1). */
  backoffMs?: (attempt: number) => number;
  log: (level: "info" | "warn" | "error", message: string, fields?: Record<string, unknown>) => void;
}

const DEFAULT_WINDOW_MS = 10 * 60_000;

/** 250 ms, 500 ms, 1 s, ... up to 8 s, each with up to 25 % jitter. */
export function restartBackoffMs(attempt: number): number {
  const base = Math.min(8_000, 250 * 2 ** (attempt - 1));
  return base * (1 + Math.random() * 0.25);
}

function describeExit(exit: ClusterExit): string {
  return exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code}`;
}

/**
 * Keeps the embedded PostgreSQL this process owns running: a death nobody asked for is noticed
 * at once (the child's exit event) and answered by a restart with backoff; crash recovery from
 * the WAL is PostgreSQL's own. Attempts are bounded per window, so a cluster that dies at every
 * start (a full disk, a corrupt data directory) is not restarted forever: then `fatal` resolves
 * and the service exits non-zero, for an outside supervisor (systemd, Kubernetes) to act on.
 */
export class EmbeddedSupervisor {
  state: DatabaseState = "up";
  /** When the current state began. */
  since = new Date();
  /** Successful restarts since this process started. */
  restarts = 0;
  lastExit: string | undefined;
  readonly fatal: Promise<Error>;
  private failWith!: (err: Error) => void;
  private readonly attempts: number[] = [];
  private stopped = false;
  private recovering: Promise<void> | undefined;
  private wakeDelay: (() => void) | undefined;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly cluster: EmbeddedCluster,
    private readonly options: SupervisorOptions,
  ) {
    this.fatal = new Promise((resolve) => (this.failWith = resolve));
    this.unsubscribe = cluster.onExit((exit) => {
      if (exit.requested || this.stopped) return;
      this.lastExit = describeExit(exit);
      this.recovering = this.recover(exit);
    });
  }

  private setState(state: DatabaseState): void {
    this.state = state;
    this.since = new Date();
  }

  private async recover(exit: ClusterExit): Promise<void> {
    const downAt = Date.now();
    this.setState("restarting");
    if (this.options.maxRestarts === 0) {
      return this.fail(
        `the embedded PostgreSQL exited unexpectedly (${describeExit(exit)}); restarts are disabled (LEDGER_EMBEDDED_RESTARTS=0)`,
      );
    }
    this.options.log("warn", "embedded PostgreSQL exited unexpectedly; restarting it", {
      exit: describeExit(exit),
      pid: exit.pid,
    });
    const windowMs = this.options.windowMs ?? DEFAULT_WINDOW_MS;
    for (let attempt = 1; ; attempt++) {
      const now = Date.now();
      while (this.attempts.length > 0 && this.attempts[0]! < now - windowMs) this.attempts.shift();
      if (this.attempts.length >= this.options.maxRestarts) {
        return this.fail(
          `the embedded PostgreSQL could not be kept running: ${this.attempts.length} start attempts within ${windowMs / 1000} s (LEDGER_EMBEDDED_RESTARTS=${this.options.maxRestarts}); last exit: ${this.lastExit}`,
        );
      }
      await new Promise<void>((resolve) => {
        this.wakeDelay = resolve;
        setTimeout(resolve, (this.options.backoffMs ?? restartBackoffMs)(attempt));
      });
      if (this.stopped) return;
      this.attempts.push(Date.now());
      try {
        await this.cluster.restart();
        this.restarts++;
        this.setState("up");
        this.options.log("info", "embedded PostgreSQL is running again", {
          downMs: Date.now() - downAt,
          attempt,
          pid: this.cluster.pid,
        });
        return;
      } catch (err) {
        this.options.log("warn", "embedded PostgreSQL restart attempt failed", {
          attempt,
          reason: (err as Error).message,
        });
      }
    }
  }

  private fail(reason: string): void {
    this.setState("failed");
    this.options.log("error", reason);
    this.failWith(new Error(reason));
  }

  /** No restart from here on (a shutdown is under way); waits for an attempt in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe();
    this.wakeDelay?.();
    await this.recovering;
  }
}
