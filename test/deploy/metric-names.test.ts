/**
 * Every metric the Prometheus rules and the Grafana dashboard of deploy/ read is one the service
 * really exports, with the label values they match: the names are checked against /metrics
 * scraped from real processes (`serve` with a Redis, `worker --transport nats` with a nats-server),
 * so renaming a metric or a label value breaks this test. The dashboard reads only recording
 * rules of rules.yml or exported metrics, and each of its queries parses (promtool).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { stringify } from "yaml";
import { signToken } from "../../src/api/auth.ts";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { startApi } from "../api/harness.ts";
import { CliChild, childEnv, httpClient } from "../cli/cli-child.ts";
import { TestNats } from "../../support/nats-server.ts";
import { pollUntil } from "../../support/poll.ts";
import { TestRedis } from "../../support/redis-server.ts";
import { createTestDatabase } from "../support/test-db.ts";
import {
  dashboardPanels,
  loadRules,
  missing,
  parseScrape,
  promtool,
  selectors,
  type Scrape,
  type Selector,
} from "./promql-names.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;

async function scrape(url: string): Promise<string> {
  const response = await fetch(url);
  assert.equal(response.status, 200, `${url}: ${response.status}`);
  return response.text();
}

/** serve (with Redis) after a like, a repeated like and the consumer's apply; worker --transport nats. */
async function scrapeRealProcesses(t: test.TestContext): Promise<Scrape[]> {
  const db = await createTestDatabase({ partitions: 2, poolSize: 2 });
  const redis = await TestRedis.start();
  const nats = await TestNats.start();
  const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-metric-names-"));
  const children: CliChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    await nats.close();
    await redis.kill();
    await db.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  const secret = randomBytes(32).toString("hex");
  const env = childEnv({
    DATABASE_URL: db.url,
    LEDGER_DATA_DIR: dataDir,
    LEDGER_JWT_SECRET: secret,
    REDIS_URL: redis.url,
    NATS_URL: nats.url,
    PORT: String(await freePort()),
  });
  const serve = new CliChild("serve", ["serve"], env);
  children.push(serve);
  const metricsPort = await freePort();
  const worker = new CliChild("worker", ["worker", "--transport", "nats", "--metrics-port", String(metricsPort)], env);
  children.push(worker);
  const address = LISTENING.exec(await serve.waitFor(LISTENING, 90_000))![1]!;
  await worker.waitFor(/"msg":"started"/, 90_000);

  const call = httpClient(address);
  const key = new TextEncoder().encode(secret);
  const admin = await signToken(key, "root", { admin: true });
  const alice = await signToken(key, "alice");
  assert.equal((await call("PUT", "/v1/items/item-1", admin)).status, 200);
  for (let i = 0; i < 2; i++) assert.equal((await call("PUT", "/v1/items/item-1/likes/me", alice)).status, 200); // CHANGED, then NOOP
  assert.equal((await call("GET", "/v1/items/item-1/like-count")).status, 200);
  const served = await pollUntil(
    "the like applied by serve's consumer",
    () => scrape(`${address}/metrics`),
    (text) => /^ledger_consumer_events_total\{consumer="like_count",verdict="applied"\} 1$/m.test(text),
  );
  const worked = await scrape(`http://127.0.0.1:${metricsPort}/metrics`);
  // The connection states: the worker's broker connection is up; serve has none (no series, not a 0).
  assert.match(worked, /^ledger_nats_connected 1$/m);
  assert.doesNotMatch(served, /^ledger_nats_connected/m);
  assert.match(served, /^ledger_redis_up 1$/m);
  return [parseScrape(served), parseScrape(worked)];
}

test(
  "every metric and label value that deploy/prometheus/rules.yml and deploy/grafana/social-ledger.json read is on a real /metrics of serve or worker --transport nats",
  { timeout: 180_000 },
  async (t) => {
    const scrapes = await scrapeRealProcesses(t);
    const rules = await loadRules();
    const rulesByName = new Map(rules.flatMap((r) => (r.record ? [[r.record, r] as const] : [])));
    /** The exported metrics a selector reads: itself, or (for a recording rule) those its expression reads, with the selector's matchers. */
    const sources = (s: Selector): Selector[] => {
      const rule = rulesByName.get(s.name);
      if (!rule) return [s];
      return selectors(rule.expr).flatMap((inner) =>
        sources({ name: inner.name, equals: { ...inner.equals, ...s.equals } }),
      );
    };
    const check = (where: string, expr: string) => {
      const found = selectors(expr);
      assert.ok(found.length > 0, `${where}: a query that reads no metric: ${expr}`);
      return found.flatMap((s) => {
        // A label value asked of a recording rule must be carried by a metric the rule reads.
        const why = rulesByName.has(s.name)
          ? Object.keys(s.equals).length > 0 && sources(s).every((inner) => missing(inner, scrapes) !== undefined)
            ? `no metric that ${s.name} reads has ${JSON.stringify(s.equals)}`
            : undefined
          : missing(s, scrapes);
        return why ? [`${where}: ${why}`] : [];
      });
    };
    const problems = rules.flatMap((r) => check(r.record ?? r.alert!, r.expr));
    const panels = (await dashboardPanels()).filter((p) => p.type !== "row");
    assert.ok(panels.length >= 15, `the dashboard has its panels (${panels.length})`);
    for (const p of panels) {
      assert.ok((p.targets ?? []).length > 0, `panel "${p.title}" has a query`);
      for (const target of p.targets!) {
        problems.push(...check(`panel "${p.title}" ${target.refId}`, target.expr!));
        // The dashboard is built from the recording rules: each query reads at least one of them.
        assert.ok(
          selectors(target.expr!).some((s) => rulesByName.has(s.name)),
          `panel "${p.title}" reads a recording rule: ${target.expr}`,
        );
      }
    }
    assert.deepEqual(problems, []);

    // Negative controls: a renamed metric, a label value the service does not use, a histogram
    // suffix of a counter, and a metric only the JetStream worker exports looked up in serve's scrape.
    assert.match(missing({ name: "ledger_lag_event", equals: {} }, scrapes) ?? "", /not on \/metrics/);
    assert.match(
      missing({ name: "ledger_consumer_failures_total", equals: { consumer: "likes" } }, scrapes) ?? "",
      /consumer="likes"/,
    );
    assert.match(
      missing({ name: "ledger_consumer_failures_total_count", equals: {} }, scrapes) ?? "",
      /not on \/metrics/,
    );
    assert.match(
      missing({ name: "ledger_transport_dead_letters_total", equals: {} }, [scrapes[0]!]) ?? "",
      /not on \/metrics/,
    );
    assert.equal(
      missing({ name: "ledger_count_drift_bucket", equals: { kind: "likes", origin: "rebuild" } }, scrapes),
      undefined,
    );
    assert.deepEqual(check("control", 'ledger_consumer:failures:rate5m{consumer="likes"}'), [
      'control: no metric that ledger_consumer:failures:rate5m reads has {"consumer":"likes"}',
    ]);
    assert.deepEqual(check("control", 'ledger_consumer:failures:rate5m{consumer="like_count"}'), []);
  },
);

test("every query of the Grafana dashboard parses as PromQL (promtool check rules over them as recording rules)", async () => {
  const panels = (await dashboardPanels()).filter((p) => p.type !== "row");
  const rules = panels.flatMap((p, i) =>
    (p.targets ?? []).map((target) => ({ record: `grafana:panel_${i}_${target.refId}`, expr: target.expr })),
  );
  const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-grafana-"));
  try {
    await writeFile(path.join(dir, "panels.yml"), stringify({ groups: [{ name: "grafana", rules }] }));
    const r = promtool(["check", "rules", "panels.yml"], dir);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, new RegExp(`SUCCESS: ${rules.length} rules found`));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test(
  "without Redis /metrics has no ledger_redis_up (a 0 would read as degraded); the drift histogram has its zero series before any drift, so a rule's increase() sees the first one",
  { timeout: 60_000 },
  async (t) => {
    const h = await startApi({ partitions: 1 });
    t.after(() => h.close());
    const text = (await h.request("GET", "/metrics")).text;
    assert.doesNotMatch(text, /^ledger_redis_up/m);
    assert.doesNotMatch(text, /^ledger_redis_evicted_keys/m);
    for (const [kind, origin] of [
      ["likes", "reconcile"],
      ["followers", "reconcile"],
      ["comments", "reconcile"],
      ["likes", "rebuild"],
      ["comments", "rebuild"],
    ]) {
      for (const sign of ["under", "over"])
        assert.match(
          text,
          new RegExp(`^ledger_count_drift_count\\{kind="${kind}",sign="${sign}",origin="${origin}"\\} 0$`, "m"),
        );
    }
  },
);
