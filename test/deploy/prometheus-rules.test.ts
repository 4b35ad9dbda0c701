/**
 * The Prometheus rules of deploy/prometheus: promtool accepts them, and their unit tests
 * (rules.test.yml: series that fire each alert and series that must not) pass. Negative controls:
 * broken variants of the rules, written to a temporary directory, must fail those unit tests.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { PROMETHEUS_DIR, promtool } from "./promql-names.ts";

test("promtool check rules accepts deploy/prometheus/rules.yml", () => {
  const r = promtool(["check", "rules", "rules.yml"], PROMETHEUS_DIR);
  assert.equal(r.code, 0, r.output);
  assert.match(r.output, /SUCCESS: \d+ rules found/);
});

test("promtool test rules: every alert fires on its series and stays silent on the others; the recording rules compute the likes chapter's four numbers", () => {
  const r = promtool(["test", "rules", "rules.test.yml"], PROMETHEUS_DIR);
  assert.equal(r.code, 0, r.output);
  assert.match(r.output, /SUCCESS/);
});

/** The unit tests run against rules.yml with one replacement made, in a temporary copy. */
async function testVariant(from: string, to: string): Promise<{ code: number | null; output: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-rules-"));
  try {
    const rules = await readFile(path.join(PROMETHEUS_DIR, "rules.yml"), "utf8");
    assert.ok(rules.includes(from), `rules.yml contains ${from}`);
    await writeFile(path.join(dir, "rules.yml"), rules.replace(from, to));
    await copyFile(path.join(PROMETHEUS_DIR, "rules.test.yml"), path.join(dir, "rules.test.yml"));
    return promtool(["test", "rules", "rules.test.yml"], dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("negative controls: rules that alert on any lag, sum the figures every process exports alike, count a single failure, or raise a runtime alarm at a blip or a busy pool fail the unit tests", async () => {
  const variants: { what: string; from: string; to: string; fails: RegExp }[] = [
    {
      what: "stalled without the standing-still watermark (lag alone is an alarm)",
      from: "and on (view, partition) max by (view, partition) (changes(ledger_watermark[5m])) == 0\n",
      to: "",
      fails: /alertname: LedgerWatermarkStalled/,
    },
    {
      what: "lag per view summed over processes instead of max",
      from: "expr: sum by (view) (max by (view, partition) (ledger_lag_events))",
      to: "expr: sum by (view) (ledger_lag_events)",
      fails: /expr: "ledger_view:lag_events:sum/,
    },
    {
      what: "drift found summed over processes instead of max",
      from: "expr: max by (kind, sign, origin) (increase(ledger_count_drift_sum[1h]))",
      to: "expr: sum by (kind, sign, origin) (increase(ledger_count_drift_sum[1h]))",
      fails: /expr: "ledger_kind:count_drift_abs:increase1h"/,
    },
    {
      what: "feed drift summed over processes instead of max",
      from: "expr: max by (kind) (increase(ledger_feed_drift_rows_total[1h]))",
      to: "expr: sum by (kind) (increase(ledger_feed_drift_rows_total[1h]))",
      fails: /expr: "ledger_feed:drift_rows:increase1h/,
    },
    {
      what: "a feed drift alert that fires on the zero series",
      from: "expr: max by (kind) (increase(ledger_feed_drift_rows_total[15m])) > 0",
      to: "expr: max by (kind) (increase(ledger_feed_drift_rows_total[15m])) >= 0",
      fails: /alertname: LedgerFeedDriftFound/,
    },
    {
      what: "a consumer alarm at the first failed pass",
      from: "(increase(ledger_consumer_failures_total[5m])) >= 5",
      to: "(increase(ledger_consumer_failures_total[5m])) > 0",
      fails: /alertname: LedgerConsumerFailing/,
    },
    {
      what: "a growing-lag alarm without the rising term (a steady backlog raises it)",
      from: "and on (view, partition) max by (view, partition) (deriv(ledger_lag_events[15m])) > 0\n",
      to: "",
      fails: /alertname: LedgerLagGrowing/,
    },
    {
      what: "an event-loop delay alarm without its 5 minutes (a GC pause or one slow scrape interval raises it)",
      from: "expr: ledger_nodejs_eventloop_lag_p99_seconds > 0.1\n        for: 5m",
      to: "expr: ledger_nodejs_eventloop_lag_p99_seconds > 0.1\n        for: 0m",
      fails: /alertname: LedgerEventLoopDelayHigh/,
    },
    {
      what: "a pool alarm at a busy but sufficient pool (5 % of checkouts slow)",
      from: "expr: ledger_instance:db_pool_slow_checkouts:ratio5m > 0.1",
      to: "expr: ledger_instance:db_pool_slow_checkouts:ratio5m > 0.01",
      fails: /alertname: LedgerDatabasePoolWaits/,
    },
  ];
  for (const v of variants) {
    const r = await testVariant(v.from, v.to);
    assert.notEqual(r.code, 0, `${v.what}: the unit tests must fail\n${r.output}`);
    assert.match(r.output, v.fails, `${v.what}: the failure names the broken rule\n${r.output}`);
  }
});
