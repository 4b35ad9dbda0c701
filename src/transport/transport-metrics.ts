import type { NatsConnection } from "@nats-io/transport-node";
import client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { refresherOf } from "../metrics-refresh.ts";
import { transportLag } from "./relay-watermark.ts";
import { TRANSPORT_KINDS } from "./transport-kinds.ts";

/** The transport's metrics, in the process's registry (serve's and worker's /metrics). */
export class TransportMetrics {
  readonly published: client.Counter<"kind" | "result">;
  readonly deadLetters: client.Counter<"kind" | "reason">;
  readonly gapFilled: client.Counter<"kind">;
  private readonly registry: client.Registry;
  /** The broker connection ledger_nats_connected reports; none until the process has connected. */
  private nats: { connection: NatsConnection; connected: boolean } | undefined;

  constructor(registry: client.Registry, pool: Pool) {
    this.registry = registry;
    this.published = new client.Counter({
      name: "ledger_transport_published_total",
      help: "Outbox events the relay published, stored or dropped as duplicates by JetStream",
      labelNames: ["kind", "result"],
      registers: [registry],
    });
    this.deadLetters = new client.Counter({
      name: "ledger_transport_dead_letters_total",
      help: "Messages moved to the dead-letter stream, by reason (malformed, verification, attempts)",
      labelNames: ["kind", "reason"],
      registers: [registry],
    });
    this.gapFilled = new client.Counter({
      name: "ledger_transport_gap_filled_events_total",
      help: "Events the relay had published that the broker did not get through for a whole gap-check interval, applied from the outbox",
      labelNames: ["kind"],
      registers: [registry],
    });
    for (const kind of TRANSPORT_KINDS) {
      this.gapFilled.inc({ kind }, 0);
      for (const reason of ["malformed", "verification", "attempts", "lost"]) this.deadLetters.inc({ kind, reason }, 0);
    }
    // Read on the registry's refresh timer, never by a scrape (src/metrics-refresh.ts).
    let lagRows: Awaited<ReturnType<typeof transportLag>> = [];
    refresherOf(registry).add(async () => {
      lagRows = await transportLag(pool).catch(() => []);
    });
    new client.Gauge({
      name: "ledger_transport_relay_lag_events",
      help: "Outbox events not yet published to JetStream, per kind and partition",
      labelNames: ["kind", "partition"],
      registers: [registry],
      collect() {
        this.reset();
        const rows = lagRows;
        for (const r of rows)
          if (r.published !== null) this.set({ kind: r.kind, partition: String(r.part) }, r.last - r.published);
      },
    });
  }

  /** Follows the connection's status events for ledger_nats_connected (no request to the broker at scrape time). */
  watchConnection(connection: NatsConnection): void {
    const nats = { connection, connected: !connection.isClosed() };
    // Registered with the first connection: a gauge without labels reads 0 from its creation, which would look like an outage.
    if (!this.nats) {
      const current = () => this.nats;
      new client.Gauge({
        name: "ledger_nats_connected",
        help: "1 while this process's connection to the NATS broker is up, 0 while it is disconnected (reconnecting) or closed",
        registers: [this.registry],
        collect() {
          const watched = current();
          this.set(watched && watched.connected && !watched.connection.isClosed() ? 1 : 0);
        },
      });
    }
    this.nats = nats;
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === "disconnect") nats.connected = false;
        if (status.type === "reconnect") nats.connected = true;
      }
    })().catch(() => undefined);
    void connection.closed().finally(() => {
      nats.connected = false;
    });
  }
}
