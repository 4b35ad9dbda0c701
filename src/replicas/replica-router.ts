import type { PostgresTimeouts } from "../config.ts";
import { ConnectionLostError, TransactionConflictError } from "../db/errors.ts";
import { createPool, type Pool } from "../db/pool.ts";
import { parseLsn } from "./wal-position.ts";

/** One streaming replica the router may read from. */
export interface Replica {
  /** A label for metrics and the x-ledger-read-from header ("replica-0"): URLs carry passwords. */
  name: string;
  pool: Pool;
}

/** What the last check of a replica found. */
export interface ReplicaState {
  name: string;
  /** It answered the last check (or the last read) and is a standby. */
  up: boolean;
  /** How far the primary's WAL position was ahead of the replica's replay position at the check, in bytes. */
  lagBytes: number | null;
  /** 0 when it had replayed everything; otherwise the age of the last commit it replayed (null: none yet). */
  lagMs: number | null;
  /** The largest replay position seen (replay only moves forward while the server runs). */
  replayed: bigint;
  /** Why it is down, for logs. */
  reason?: string;
}

/** Why a read went where it went (a label of ledger_replica_reads_total). */
export type RouteReason =
  | "replica" // no token: a replica within the lag threshold, as it is
  | "token-replayed" // the replica has replayed the caller's token
  | "token-not-replayed" // no replica replayed the token within the wait: primary
  | "replicas-lagging" // every replica that is up lags more than the threshold: primary
  | "replicas-down" // no replica answers: primary
  | "replica-failed"; // the replica failed during the read: retried on the primary

export interface ReadRoute {
  pool: Pool;
  /** "primary" or a replica's name. */
  server: string;
  reason: RouteReason;
}

export interface ReplicaRouterOptions {
  /** LEDGER_REPLICA_MAX_LAG_MS: a replica whose lag is above this is skipped by reads without a token. */
  maxLagMs: number;
  /** LEDGER_REPLICA_TOKEN_WAIT_MS: how long a read with a token waits for a replica to replay it before reading the primary. */
  tokenWaitMs: number;
  /** How often the lag of every replica is checked (LEDGER_REPLICA_CHECK_MS). */
  checkEveryMs: number;
  /** Pause between two replay checks while a token read waits. */
  tokenPollMs?: number;
  /** Each check of a replica (metrics). */
  onState?: (state: ReplicaState) => void;
  /** A read with a token found no replica that had replayed it and starts waiting (metrics; tests). */
  onTokenWait?: () => void;
  /** Each routed read (metrics). */
  onRoute?: (route: { server: string; reason: RouteReason }) => void;
  /**
   * "replay" (ours). "ignore" is a negative control: a token is treated as no token, so a read
   * after a write can be served by a replica that has not replayed it (stale state).
   */
  tokenCheck?: "replay" | "ignore";
}

/**
 * Read routing over streaming replicas (GitLab's database load balancer, SpiceDB's
 * at_least_as_fresh): a read without a token goes to a replica within the lag threshold, a
 * read with a freshness token to a replica whose replay position has passed it, waiting up to
 * tokenWaitMs, and otherwise to the primary. A replica that is down, lags too much or fails a
 * read is never an error for the caller: the read goes to the primary. Only reads that may lag
 * are routed here; writes and authorization reads always use the primary (docs/read-replicas.md).
 */
export class ReplicaRouter {
  private readonly states = new Map<string, ReplicaState>();
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  private next = 0;

  constructor(
    readonly primary: Pool,
    readonly replicas: readonly Replica[],
    private readonly options: ReplicaRouterOptions,
  ) {
    for (const r of replicas)
      this.states.set(r.name, {
        name: r.name,
        up: false,
        lagBytes: null,
        lagMs: null,
        replayed: 0n,
        reason: "not checked yet",
      });
  }

  /** Pools for DATABASE_REPLICA_URLS, named replica-0, replica-1, ... in the order given. */
  static fromUrls(
    primary: Pool,
    urls: readonly string[],
    options: ReplicaRouterOptions & { poolSize?: number; timeouts?: PostgresTimeouts },
  ): ReplicaRouter {
    const replicas = urls.map((url, i) => ({
      name: `replica-${i}`,
      // A replica that is gone must fail fast: the read then goes to the primary.
      pool: createPool({
        connectionString: url,
        max: options.poolSize ?? 10,
        applicationName: "social-ledger-replica-read",
        connectionTimeoutMs: 1_000,
        queryTimeoutMs: options.timeouts?.queryTimeoutMs,
        keepAliveMs: options.timeouts?.keepAliveMs,
        idleMs: options.timeouts?.idleMs,
      }),
    }));
    return new ReplicaRouter(primary, replicas, options);
  }

  /** Checks every replica now, then every checkEveryMs. */
  async start(): Promise<void> {
    await this.checkNow();
    this.timer = setInterval(() => void this.checkNow(), this.options.checkEveryMs);
    this.timer.unref();
  }

  /** Stops the checks and closes the replica pools (the primary pool is the caller's). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.checking;
    await Promise.all(this.replicas.map((r) => r.pool.end().catch(() => undefined)));
  }

  state(name: string): ReplicaState | undefined {
    const s = this.states.get(name);
    return s && { ...s };
  }

  /** One check of every replica: its replay position against the primary's WAL position. */
  checkNow(): Promise<void> {
    this.checking ??= this.check().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  private async check(): Promise<void> {
    let primaryLsn: bigint | undefined;
    try {
      const { rows } = await this.primary.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
      primaryLsn = parseLsn(rows[0]!.lsn);
    } catch {
      // Without the primary's position the lag is unknown; the replicas' own answers still say whether they are up.
    }
    await Promise.all(
      this.replicas.map(async (replica) => {
        const state = this.states.get(replica.name)!;
        try {
          const { rows } = await replica.pool.query<{
            standby: boolean;
            replay: string | null;
            since_ms: number | null;
          }>(
            `SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replay,
                  (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS since_ms`,
          );
          const row = rows[0]!;
          if (!row.standby || row.replay === null) {
            // A promoted replica takes writes of its own: reading it could show state the primary never had.
            Object.assign(state, {
              up: false,
              lagBytes: null,
              lagMs: null,
              reason: "not a standby (pg_is_in_recovery() is false)",
            });
          } else {
            const replayed = parseLsn(row.replay);
            // A restarted standby may open at an older position than it had shown: take what it says now.
            state.replayed = replayed;
            const behind = primaryLsn === undefined ? null : primaryLsn > replayed ? primaryLsn - replayed : 0n;
            Object.assign(state, {
              up: true,
              lagBytes: behind === null ? null : Number(behind),
              lagMs: behind === 0n ? 0 : row.since_ms === null ? null : Math.max(0, Math.round(row.since_ms)),
              reason: undefined,
            });
          }
        } catch (err) {
          Object.assign(state, {
            up: false,
            lagBytes: null,
            lagMs: null,
            reason: err instanceof Error ? err.message : String(err),
          });
        }
        this.options.onState?.({ ...state });
      }),
    );
  }

  /** Whether a read without a token may use this replica: up, and its lag known and within the threshold. */
  private withinLag(state: ReplicaState): boolean {
    return state.up && state.lagMs !== null && state.lagMs <= this.options.maxLagMs;
  }

  /** The replicas in round-robin order, starting at a different one each call. */
  private rotation(): Replica[] {
    const start = this.next++ % Math.max(1, this.replicas.length);
    return [...this.replicas.slice(start), ...this.replicas.slice(0, start)];
  }

  /** Where a read with this token (or none) goes now. */
  async route(token: bigint | undefined): Promise<ReadRoute> {
    const primary = (reason: RouteReason): ReadRoute => ({ pool: this.primary, server: "primary", reason });
    const order = this.rotation();
    if (token === undefined || this.options.tokenCheck === "ignore") {
      const fresh = order.find((r) => this.withinLag(this.states.get(r.name)!));
      if (fresh) return { pool: fresh.pool, server: fresh.name, reason: "replica" };
      return primary(order.some((r) => this.states.get(r.name)!.up) ? "replicas-lagging" : "replicas-down");
    }
    const candidates = order.filter((r) => this.states.get(r.name)!.up);
    if (candidates.length === 0) return primary("replicas-down");
    const deadline = Date.now() + this.options.tokenWaitMs;
    for (let round = 0; ; round++) {
      for (const replica of candidates) {
        const state = this.states.get(replica.name)!;
        if (state.replayed >= token) return { pool: replica.pool, server: replica.name, reason: "token-replayed" };
      }
      // Ask the replicas for their replay position (the monitor's value may be a second old).
      const answers = await Promise.all(candidates.map((r) => this.readReplay(r)));
      const ready = candidates.find((_, i) => answers[i] !== undefined && answers[i]! >= token);
      if (ready) return { pool: ready.pool, server: ready.name, reason: "token-replayed" };
      if (Date.now() >= deadline || candidates.every((r) => !this.states.get(r.name)!.up))
        return primary("token-not-replayed");
      if (round === 0) this.options.onTokenWait?.();
      await new Promise((resolve) => setTimeout(resolve, this.options.tokenPollMs ?? 5));
    }
  }

  private async readReplay(replica: Replica): Promise<bigint | undefined> {
    const state = this.states.get(replica.name)!;
    try {
      const { rows } = await replica.pool.query<{ replay: string | null }>(
        "SELECT pg_last_wal_replay_lsn()::text AS replay",
      );
      const replay = rows[0]!.replay;
      if (replay === null) return undefined;
      const value = parseLsn(replay);
      if (value > state.replayed) state.replayed = value;
      return value;
    } catch (err) {
      this.markDown(replica, err);
      return undefined;
    }
  }

  private markDown(replica: Replica, err: unknown): void {
    const state = this.states.get(replica.name)!;
    Object.assign(state, {
      up: false,
      lagBytes: null,
      lagMs: null,
      reason: err instanceof Error ? err.message : String(err),
    });
    this.options.onState?.({ ...state });
  }

  /**
   * Runs a read where route() sends it. A replica that fails it with a lost connection, or
   * cancels it for a recovery conflict (40001/40P01 on a standby), is marked down until the
   * next check and the read runs again on the primary: the caller never sees a replica's failure.
   */
  async read<T>(
    token: bigint | undefined,
    run: (pool: Pool) => Promise<T>,
  ): Promise<{ value: T; server: string; reason: RouteReason }> {
    const route = await this.route(token);
    if (route.server !== "primary") {
      try {
        const value = await run(route.pool);
        this.options.onRoute?.({ server: route.server, reason: route.reason });
        return { value, server: route.server, reason: route.reason };
      } catch (err) {
        if (!(err instanceof ConnectionLostError || err instanceof TransactionConflictError)) throw err;
        this.markDown(
          this.replicas.find((r) => r.name === route.server)!,
          err,
        );
        route.reason = "replica-failed";
      }
    }
    const value = await run(this.primary);
    this.options.onRoute?.({ server: "primary", reason: route.reason });
    return { value, server: "primary", reason: route.reason };
  }
}
