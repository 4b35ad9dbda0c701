import client from "prom-client";
import type { ReplicaState, RouteReason } from "./replica-router.ts";

/**
 * Replica figures: lag in seconds and bytes and whether each replica is up (from the router's
 * checks), and where routed reads went and why. One instance per registry; its two methods are
 * the router's onState and onRoute.
 */
export class ReplicaMetrics {
  private readonly lagSeconds: client.Gauge<"replica">;
  private readonly lagBytes: client.Gauge<"replica">;
  private readonly up: client.Gauge<"replica">;
  private readonly reads: client.Counter<"server" | "reason">;
  private readonly tokenWaits: client.Counter;

  constructor(registry: client.Registry) {
    const registers = [registry];
    this.lagSeconds = new client.Gauge({
      name: "ledger_replica_lag_seconds",
      help: "Replication lag per replica: 0 when it has replayed the primary's WAL position, else the age of the last commit it replayed (-1: unknown or down)",
      labelNames: ["replica"],
      registers,
    });
    this.lagBytes = new client.Gauge({
      name: "ledger_replica_lag_bytes",
      help: "Primary WAL position minus the replica's replay position at the last check (-1: unknown or down)",
      labelNames: ["replica"],
      registers,
    });
    this.up = new client.Gauge({
      name: "ledger_replica_up",
      help: "1 when the replica answered the last check as a standby",
      labelNames: ["replica"],
      registers,
    });
    this.reads = new client.Counter({
      name: "ledger_replica_reads_total",
      help: "Reads that may lag, by the server that answered (primary or a replica) and why it was chosen",
      labelNames: ["server", "reason"],
      registers,
    });
    this.tokenWaits = new client.Counter({
      name: "ledger_replica_token_waits_total",
      help: "Reads with a freshness token that no replica had replayed yet, so they waited (up to LEDGER_REPLICA_TOKEN_WAIT_MS)",
      registers,
    });
  }

  readonly onState = (state: ReplicaState): void => {
    this.up.set({ replica: state.name }, state.up ? 1 : 0);
    this.lagSeconds.set({ replica: state.name }, state.lagMs === null ? -1 : state.lagMs / 1000);
    this.lagBytes.set({ replica: state.name }, state.lagBytes === null ? -1 : state.lagBytes);
  };

  readonly onTokenWait = (): void => {
    this.tokenWaits.inc();
  };

  readonly onRoute = (route: { server: string; reason: RouteReason }): void => {
    this.reads.inc({ server: route.server, reason: route.reason });
  };
}
