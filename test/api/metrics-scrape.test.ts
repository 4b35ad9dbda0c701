import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { buildApp } from "../../src/api/app.ts";
import { signToken } from "../../src/api/auth.ts";
import { DashboardSampler } from "../../src/api/dashboard/sampler.ts";
import { LedgerMetrics } from "../../src/api/metrics.ts";
import { CacheMetrics } from "../../src/cache/cache-metrics.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { assertError, startApi } from "./harness.ts";

/**
 * /metrics answers from memory (the figures from the database are read on a
 * timer) and can require a bearer token. The statements are counted by the database itself:
 * pg_stat_statements on a cluster of the test's own, with the metrics reading as a role of
 * their own, so nothing else the process or the test runs is counted with them.
 */

const SCRAPES = 20;

test(
  "metrics: scraping /metrics runs no SQL (pg_stat_statements); the figures from the database come from the last refresh",
  { timeout: 120_000 },
  async (t) => {
    const root = await clusterTempDir("ledger-metrics-scrape-");
    const cluster = await EmbeddedCluster.start({
      dataDir: path.join(root, "pgdata"),
      settings: { shared_preload_libraries: "pg_stat_statements" },
    });
    t.after(async () => {
      await cluster.stop();
      await rm(root, { recursive: true, force: true });
    });
    const url = cluster.connectionString("postgres");
    const pool = createPool({ connectionString: url, max: 6 });
    t.after(() => pool.end());
    await migrate(pool);
    await initLedger(pool, { partitions: 2 });
    await pool.query("CREATE EXTENSION pg_stat_statements");
    const password = randomBytes(12).toString("hex");
    await pool.query(`CREATE ROLE metrics_reader LOGIN PASSWORD '${password}' IN ROLE pg_read_all_data`);
    const readerUrl = new URL(url);
    readerUrl.username = "metrics_reader";
    readerUrl.password = password;
    const metricsPool = createPool({ connectionString: readerUrl.toString(), max: 2 });
    t.after(() => metricsPool.end());

    const ledger = await openLedger(pool);
    const metrics = new LedgerMetrics(metricsPool);
    const secret = new Uint8Array(randomBytes(32));
    const app = await buildApp({
      ledger,
      jwtSecret: secret,
      logger: false,
      metrics,
      counts: new CountReader(pool, undefined, { metrics: new CacheMetrics(metrics.registry, undefined, metricsPool) }),
      dashboard: new DashboardSampler({ pool, metrics }),
      metricsRefreshMs: 3_600_000, // only the first refresh (at ready) and the ones this test asks for
    });
    t.after(() => app.close());
    const base = await app.listen({ port: 0, host: "127.0.0.1" });

    const statements = async () =>
      (
        await pool.query<{ calls: number }>(
          `SELECT coalesce(sum(s.calls), 0)::bigint AS calls FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'metrics_reader'`,
        )
      ).rows[0]!.calls;
    const scrape = async () => {
      const res = await fetch(`${base}/metrics`);
      assert.equal(res.status, 200);
      return res.text();
    };

    await ledger.likes.createItem("item-1");
    const token = await signToken(secret, "alice");
    const like = await fetch(`${base}/v1/items/item-1/likes/me`, {
      method: "PUT",
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(like.status, 200, await like.text());
    const beforeScrapes = await statements();
    let text = "";
    for (let i = 0; i < SCRAPES; i++) text = await scrape();
    assert.equal(await statements(), beforeScrapes, `${SCRAPES} scrapes ran no statement`);
    // The refresh at ready ran the figures' statements as metrics_reader: the counter sees them.
    assert.ok(beforeScrapes >= 4, `the first refresh's statements are counted: ${beforeScrapes}`);
    assert.match(text, /^ledger_scrape_database_up 1$/m);
    // The like is not in the figures yet: they are the last refresh's.
    const lag = (body: string) =>
      [...body.matchAll(/^ledger_lag_events\{view="like_count",partition="\d+"\} (\d+)$/gm)].reduce(
        (sum, m) => sum + Number(m[1]),
        0,
      );
    assert.equal(lag(text), 0, "the scrape shows the figures of the refresh before the like");

    await metrics.refresh();
    assert.ok((await statements()) > beforeScrapes, "a refresh runs the statements");
    assert.equal(lag(await scrape()), 1, "after the refresh the like's event is unapplied lag");
  },
);

test("metrics: with LEDGER_METRICS_TOKEN, /metrics is 401 without it or with another token (a JWT of the API included) and 200 with it", async (t) => {
  const metricsToken = randomBytes(24).toString("base64url");
  const h = await startApi({ app: { metricsToken } });
  t.after(() => h.close());
  const admin = await h.token("root", { admin: true });
  assertError(await h.request("GET", "/metrics"), 401, "UNAUTHENTICATED", "no token");
  assertError(await h.request("GET", "/metrics", { token: "x".repeat(32) }), 401, "UNAUTHENTICATED", "another token");
  assertError(
    await h.request("GET", "/metrics", { token: admin }),
    401,
    "UNAUTHENTICATED",
    "an admin JWT is no metrics token",
  );
  const res = await h.request("GET", "/metrics", { token: metricsToken });
  assert.equal(res.status, 200, res.text);
  assert.match(res.text, /^# TYPE http_requests_total counter$/m);
  // Without the variable /metrics stays open (Prometheus on the host, the default).
  const open = await startApi();
  t.after(() => open.close());
  assert.equal((await open.request("GET", "/metrics")).status, 200);
});
