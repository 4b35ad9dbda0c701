/**
 * One sample of the soak (bench/soak.ts): per process its resident memory and open descriptors
 * (/proc), the Node processes' heap (their /metrics), PostgreSQL's and Redis's client connections,
 * the outbox and dedup-key row counts, the consumers' lag and the webhook backlog.
 */
import { readFileSync, readdirSync } from "node:fs";
import { createClient } from "redis";
import { readDatabaseFigures } from "../src/api/metrics.ts";
import { RETENTION_TABLES } from "../src/db/retention-boundary.ts";
import type { Pool } from "../src/db/pool.ts";
import type { NodeName } from "./soak-processes.ts";

export interface ProcessFigures {
  /** VmRSS, MB. */
  rssMb: number;
  /** RssAnon, MB: private memory (PostgreSQL's VmRSS also counts the shared buffers a backend has touched). */
  anonMb: number;
  fds: number;
  /** Processes summed (PostgreSQL: the postmaster and its children). */
  count: number;
}

export interface Sample {
  minute: number;
  processes: Record<NodeName | "postgres" | "redis" | "soak", ProcessFigures>;
  heapMb: Record<NodeName, number>;
  /** Memory outside the V8 heap that RSS holds: the heap's reserved size and Buffers (external). */
  heapTotalMb: Record<NodeName, number>;
  externalMb: Record<NodeName, number>;
  connections: { postgres: number; redis: number };
  /** Rows of the outboxes and dedup keys retention prunes, in total and per table. */
  outboxRows: number;
  dedupRows: number;
  tables: Record<string, number>;
  /** Rows of the post outbox and the feed's post keys, which retention does not prune (docs/feed.md). */
  unprunedRows: number;
  lagEvents: number;
  webhookBacklog: number;
  requests: number;
  errors: number;
  p99Ms: number;
}

const OUTBOXES = Object.values(RETENTION_TABLES).map((t) => t.outbox);
const DEDUP_KEYS = Object.values(RETENTION_TABLES).flatMap((t) => [
  ...(t.keys === null ? [] : [t.keys]),
  ...t.others.map((o) => o.keys),
]);
const UNPRUNED = ["post_outbox", "feed_post_seen"];

function statusField(status: string, field: string): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  return match ? Number(match[1]) / 1024 : 0;
}

/** /proc figures of `pids` summed; a process that ended between listing and reading is skipped. */
export function processFigures(pids: readonly number[]): ProcessFigures {
  const total: ProcessFigures = { rssMb: 0, anonMb: 0, fds: 0, count: 0 };
  for (const pid of pids) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const fds = readdirSync(`/proc/${pid}/fd`).length;
      total.rssMb += statusField(status, "VmRSS");
      total.anonMb += statusField(status, "RssAnon");
      total.fds += fds;
      total.count++;
    } catch {
      continue;
    }
  }
  return total;
}

/** A process and its children (PostgreSQL's postmaster and its backends). */
export function processTree(root: number): number[] {
  const pids = [root];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = /^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${entry}/status`, "utf8"));
      if (ppid && Number(ppid[1]) === root) pids.push(Number(entry));
    } catch {
      continue;
    }
  }
  return pids;
}

/** Metric samples of a Prometheus text page: name{labels} value, by metric name. */
export function metricValues(page: string, name: string): number[] {
  const values: number[] = [];
  for (const line of page.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== " " && rest[0] !== "{") continue;
    values.push(Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return values;
}

/** A process's /metrics page; empty when it does not answer (its heap is then NaN in the sample). */
async function metricsPage(url: string): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
    return res.ok ? await res.text() : "";
  } catch {
    return "";
  }
}

export interface SamplerSources {
  pool: Pool;
  /** The Node processes: serve first (its /metrics has the webhook backlog). */
  nodes: readonly { name: NodeName; pid: number; metricsUrl: string }[];
  redisUrl: string;
  pids: { postmaster: number; redis: number };
}

export class SoakSampler {
  private readonly redis;

  constructor(private readonly sources: SamplerSources) {
    this.redis = createClient({ url: sources.redisUrl });
    this.redis.on("error", () => undefined);
  }

  async open(): Promise<void> {
    await this.redis.connect();
  }

  async close(): Promise<void> {
    await this.redis.close().catch(() => undefined);
  }

  async sample(minute: number, load: { requests: number; errors: number; p99Ms: number }): Promise<Sample> {
    const { pool, pids, nodes } = this.sources;
    const [pages, figures, connections, redisInfo] = await Promise.all([
      Promise.all(nodes.map((n) => metricsPage(n.metricsUrl))),
      readDatabaseFigures(pool),
      pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database() AND pid <> pg_backend_pid()",
      ),
      this.redis.info("clients"),
    ]);
    const tables: Record<string, number> = {};
    // Table names from the retention's own constants, not from input.
    for (const table of [...OUTBOXES, ...DEDUP_KEYS, ...UNPRUNED]) {
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
      tables[table] = rows[0]!.n;
    }
    const sum = (names: readonly string[]) => names.reduce((a, t) => a + tables[t]!, 0);
    const mb = (metric: string) => (page: string) => (metricValues(page, metric)[0] ?? NaN) / 2 ** 20;
    const heap = mb("ledger_nodejs_heap_size_used_bytes");
    const heapTotal = mb("ledger_nodejs_heap_size_total_bytes");
    const external = mb("ledger_nodejs_external_memory_bytes");
    const lag = Math.max(
      0,
      ...figures.watermarks.map((w) => w.last - w.appliedUpto),
      ...figures.notificationWatermarks.map((w) => w.lag),
    );
    const perNode = <T>(value: (node: SamplerSources["nodes"][number], k: number) => T) =>
      Object.fromEntries(nodes.map((n, k) => [n.name, value(n, k)])) as Record<NodeName, T>;
    return {
      minute,
      processes: {
        ...perNode((n) => processFigures([n.pid])),
        postgres: processFigures(processTree(pids.postmaster)),
        redis: processFigures([pids.redis]),
        soak: processFigures([process.pid]),
      },
      heapMb: perNode((_, k) => heap(pages[k]!)),
      heapTotalMb: perNode((_, k) => heapTotal(pages[k]!)),
      externalMb: perNode((_, k) => external(pages[k]!)),
      connections: {
        postgres: connections.rows[0]!.n,
        redis: Number(/connected_clients:(\d+)/.exec(redisInfo)?.[1] ?? NaN),
      },
      outboxRows: sum(OUTBOXES),
      dedupRows: sum(DEDUP_KEYS),
      tables,
      unprunedRows: sum(UNPRUNED),
      lagEvents: lag,
      webhookBacklog: metricValues(pages[0]!, "ledger_webhook_backlog_events").reduce((a, v) => a + v, 0),
      ...load,
    };
  }
}

/** Totals of the counters that count failures: consumer passes that failed, webhook attempts that failed. */
export async function failureCounters(
  metricsUrls: readonly string[],
): Promise<{ consumerFailures: number; webhookFailures: number }> {
  const page = (await Promise.all(metricsUrls.map((url) => metricsPage(url)))).join("\n");
  const failedAttempts = page
    .split("\n")
    .filter((l) => l.startsWith("ledger_webhook_deliveries_total{") && l.includes('result="failed"'))
    .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
  return {
    consumerFailures: metricValues(page, "ledger_consumer_failures_total").reduce((a, v) => a + v, 0),
    webhookFailures: failedAttempts,
  };
}
