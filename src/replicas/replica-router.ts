import type { PostgresTimeouts } from "../config.ts";
import { ConnectionLostError, DatabaseError, TransactionConflictError } from "../db/errors.ts";
import { createPool, type Pool } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { parseLsn, type FreshnessToken } from "./wal-position.ts";

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
  | "replica-failed" // the replica failed during the read: retried on the primary
  | "token-lost" // the token's write was lost in a promotion (docs/failover.md): primary, and the answer says so
  | "token-unverifiable"; // the token is of an earlier timeline whose switch point is unreadable: primary, and the answer says so

/**
 * What a token of the timeline-qualified form names on the primary's present lineage:
 * "present": a write of the present timeline; "survived": a write of an earlier timeline at or
 * below the point where the lineage left it; "lost": a write past that point, or of a timeline
 * not in the lineage (the promoted standby never had it); "unverifiable": the history is unreadable.
 */
export type TokenStanding = "present" | "survived" | "lost" | "unverifiable";

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
  /** The timeline the primary writes on, as last seen (checks, writes' tokens, tokens of another timeline). */
  private primaryTimeline: number | undefined;
  /** Per present timeline, where its lineage left each earlier timeline (it never changes for a timeline). */
  private readonly histories = new Map<number, Map<number, bigint>>();

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
      const { rows } = await this.primary.query<{ lsn: string; timeline: number }>(
        "SELECT pg_current_wal_lsn()::text AS lsn, ledger_timeline() AS timeline",
      );
      primaryLsn = parseLsn(rows[0]!.lsn);
      this.primaryTimeline = rows[0]!.timeline;
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

  /** The primary's timeline as a write's token just read it: a promotion is seen by the first write after it. */
  notePrimaryTimeline(timeline: number): void {
    this.primaryTimeline = timeline;
  }

  /**
   * Where a qualified token's write stands on the primary's lineage. A token of the timeline last
   * seen is "present" without a query; any other timeline reads the primary's present timeline, and
   * an earlier one its history (cached per present timeline). A timeline above the primary's is no
   * token this database answered: a typed error (a token of another database, or of a server fenced
   * off after a split brain).
   */
  async standing(token: FreshnessToken & { timeline: number }): Promise<TokenStanding> {
    if (token.timeline === this.primaryTimeline) return "present";
    const { rows } = await this.primary.query<{ timeline: number }>("SELECT ledger_timeline() AS timeline");
    const present = rows[0]!.timeline;
    this.primaryTimeline = present;
    if (token.timeline === present) return "present";
    if (token.timeline > present)
      throw new InvalidInputError(
        "freshness",
        `names timeline ${token.timeline}, which this database has not reached (it writes timeline ${present}): a token of another database, or of a server fenced off after a failover`,
      );
    const history = await this.history(present);
    if (history === undefined) return "unverifiable";
    const switchedAt = history.get(token.timeline);
    return switchedAt !== undefined && token.lsn <= switchedAt ? "survived" : "lost";
  }

  /** undefined when the service's role may not read it (ledger_timeline_history needs its owner to read pg_wal). */
  private async history(present: number): Promise<Map<number, bigint> | undefined> {
    const known = this.histories.get(present);
    if (known) return known;
    try {
      const { rows } = await this.primary.query<{ timeline: number; switched_at: string }>(
        "SELECT timeline, switched_at::text AS switched_at FROM ledger_timeline_history($1)",
        [present],
      );
      // An empty history on a timeline above 1 is a file that was not there: decide nothing from it.
      if (rows.length === 0) return undefined;
      const history = new Map(rows.map((r) => [r.timeline, parseLsn(r.switched_at)]));
      this.histories.set(present, history);
      return history;
    } catch (err) {
      if (err instanceof DatabaseError && err.sqlState === "42501") return undefined;
      throw err;
    }
  }

  /** Where a read with this token (or none) goes now. */
  async route(presented: FreshnessToken | undefined): Promise<ReadRoute> {
    const primary = (reason: RouteReason): ReadRoute => ({ pool: this.primary, server: "primary", reason });
    if (presented?.timeline !== undefined && this.options.tokenCheck !== "ignore") {
      const standing = await this.standing({ ...presented, timeline: presented.timeline });
      if (standing === "lost") return primary("token-lost");
      if (standing === "unverifiable") return primary("token-unverifiable");
    }
    // WAL up to a surviving token's position is the same on every timeline of the lineage, so the
    // replay position alone tells whether a replica holds the write.
    const token = presented?.lsn;
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
    token: FreshnessToken | undefined,
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
