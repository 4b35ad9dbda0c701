import { test } from "node:test";
import assert from "node:assert/strict";
import client from "prom-client";
import { createPool } from "../../src/db/pool.ts";
import { closeNats, connectNats } from "../../src/transport/jetstream-setup.ts";
import { loadTransportConfig } from "../../src/transport/transport-config.ts";
import { TransportMetrics } from "../../src/transport/transport-metrics.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";

/**
 * ledger_nats_connected follows the process's broker connection from its status events: 1 while
 * it is up, 0 while the broker is gone and the client reconnects, 1 again once it is back, 0 when
 * closed. Absent before the process has a connection. Polled on the registry: no request to the
 * broker at scrape time.
 */
test(
  "ledger_nats_connected: absent before a connection, 1 while connected, 0 while the broker is down, 1 after it returns, 0 once closed",
  { timeout: 60_000 },
  async (t) => {
    const nats = await TestNats.start();
    // The transport metrics' relay-lag refresh is never started here: the pool is never connected.
    const pool = createPool({ connectionString: "postgres://nobody@127.0.0.1:1/none" });
    t.after(async () => {
      await nats.close();
      await pool.end();
    });
    const registry = new client.Registry();
    const metrics = new TransportMetrics(registry, pool);
    const connected = async () => {
      const m = /^ledger_nats_connected (\d+)$/m.exec(await registry.metrics());
      return m ? Number(m[1]) : undefined;
    };
    assert.equal(await connected(), undefined, "no series before a connection (a 0 would read as an outage)");

    const nc = await connectNats(loadTransportConfig({ NATS_URL: nats.url }), "test-connection-metric");
    metrics.watchConnection(nc);
    assert.equal(await connected(), 1);
    await nats.stop();
    await pollUntil("ledger_nats_connected 0 with the broker gone", connected, (v) => v === 0, 20_000);
    await nats.restart();
    await pollUntil("ledger_nats_connected 1 after the broker returned", connected, (v) => v === 1, 20_000);
    await closeNats(nc);
    assert.equal(await connected(), 0, "a closed connection reads 0");
  },
);
