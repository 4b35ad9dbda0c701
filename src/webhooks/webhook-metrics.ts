import client, { type Registry } from "prom-client";
import type { Pool } from "../db/pool.ts";
import { refresherOf } from "../metrics-refresh.ts";
import { CURSOR_STATE_SQL, type CursorState } from "./cursor-state.ts";

interface EndpointFigures {
  id: string;
  status: "active" | "paused" | "failing";
  backlog: number;
  oldestSeconds: number;
}

/**
 * Webhook metrics: attempts counted where they happen (this process's delivery loops), and per
 * endpoint the status, the backlog and the age of the oldest undelivered event read from the
 * database on the registry's refresh timer, so they are right whichever process delivers.
 */
export class WebhookMetrics {
  readonly deliveries: client.Counter<"endpoint" | "result">;
  readonly lostDeliveries: client.Counter<"endpoint">;
  private figures: EndpointFigures[] = [];

  constructor(registry: Registry, pool: Pool, failingAfter: number) {
    this.deliveries = new client.Counter({
      name: "ledger_webhook_deliveries_total",
      help: "Webhook delivery attempts by endpoint and result (delivered: a 2xx; failed: anything else, retried later)",
      labelNames: ["endpoint", "result"],
      registers: [registry],
    });
    this.lostDeliveries = new client.Counter({
      name: "ledger_webhook_lost_deliveries_total",
      help: "Messages an endpoint acknowledged whose event a database promotion lost (docs/failover.md)",
      labelNames: ["endpoint"],
      registers: [registry],
    });
    refresherOf(registry).add(async () => {
      this.figures = await readEndpointFigures(pool, failingAfter).catch(() => this.figures);
    });
    const figures = () => this.figures;
    const perEndpoint = (name: string, help: string, value: (f: EndpointFigures) => number) =>
      new client.Gauge({
        name,
        help,
        labelNames: ["endpoint"],
        registers: [registry],
        collect() {
          this.reset();
          for (const f of figures()) this.set({ endpoint: f.id }, value(f));
        },
      });
    perEndpoint("ledger_webhook_backlog_events", "Outbox events past no cursor of the endpoint yet", (f) => f.backlog);
    perEndpoint(
      "ledger_webhook_oldest_pending_seconds",
      "Age of the endpoint's oldest undelivered event (0: none)",
      (f) => f.oldestSeconds,
    );
    perEndpoint(
      "ledger_webhook_endpoint_failing",
      "1 while an event of the endpoint has failed LEDGER_WEBHOOK_FAILING_AFTER attempts in a row",
      (f) => (f.status === "failing" ? 1 : 0),
    );
    new client.Gauge({
      name: "ledger_webhook_endpoints",
      help: "Registered webhook endpoints by status",
      labelNames: ["status"],
      registers: [registry],
      collect() {
        this.reset();
        for (const status of ["active", "paused", "failing"] as const)
          this.set({ status }, figures().filter((f) => f.status === status).length);
      },
    });
  }

  readonly onAttempt = (endpoint: string, result: "delivered" | "failed"): void => {
    this.deliveries.inc({ endpoint, result });
  };
}

async function readEndpointFigures(pool: Pool, failingAfter: number): Promise<EndpointFigures[]> {
  const [endpoints, cursors] = await Promise.all([
    pool.query<{ endpoint_id: string; paused: boolean }>(
      "SELECT endpoint_id, paused FROM webhook_endpoint ORDER BY endpoint_id",
    ),
    pool.query<CursorState>(CURSOR_STATE_SQL, [null]),
  ]);
  return endpoints.rows.map((e) => {
    const own = cursors.rows.filter((c) => c.endpointId === e.endpoint_id);
    const failing = own.some((c) => c.attempts >= failingAfter);
    return {
      id: e.endpoint_id,
      status: e.paused ? "paused" : failing ? "failing" : "active",
      backlog: own.reduce((n, c) => n + Math.max(0, c.last - c.deliveredUpto), 0),
      oldestSeconds: own.reduce((age, c) => Math.max(age, c.oldestPendingSeconds ?? 0), 0),
    };
  });
}
