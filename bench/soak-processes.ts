/**
 * What the soak (bench/soak.ts) runs: its own embedded PostgreSQL 16 cluster, redis-server on a
 * free port, `social-ledger serve` (consumers, Redis counts, webhook loops, the periodic prune and
 * audit), a second consumer process (`social-ledger worker`) and a `social-ledger webhook-worker`
 * as child processes, with short
 * retention, prune, audit and reconciliation periods so that those run many times in one run.
 * Each child's stdout is scanned for log lines at error level and above (LOG_LEVEL=warn).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createClient } from "redis";
import { EmbeddedCluster, clusterTempDir, freePort } from "../src/db/embedded-cluster.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { TestRedis } from "../support/redis-server.ts";
import { pollUntil } from "../support/poll.ts";
import { started } from "./lifecycle.ts";

const REPO_ROOT = fileURLToPath(new URL("../", import.meta.url));
const BIN = path.join(REPO_ROOT, "bin", "social-ledger.mjs");

/** The service's settings for the soak: periods short enough that prune, audit and reconciliation run every few samples. */
export const SOAK_SETTINGS = {
  partitions: 16,
  pruneEveryMs: 20_000,
  keepEvents: 100,
  // Longer than an audit period and its run: the periodic audit finds its cursors above the
  // retention floor and runs incrementally, as it does in a deployment (24 h kept). Kept shorter,
  // every run was the full form, whose home-timeline section at the inbox cap took 10 s a statement.
  keepMs: 420_000,
  // serve's default (LEDGER_AUDIT_EVERY_MS): every 30 s, the audits took two thirds of the time.
  auditEveryMs: 300_000,
  // The dashboard's plots keep this much history in serve's heap (1 h by default): filled within the warm-up, so that its growth is not read as a leak.
  dashboardHistoryMs: 300_000,
  reconcileIntervalMs: 20_000,
};

/** Variables of the caller's shell that would point a child elsewhere or change its settings. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^(LEDGER_|DATABASE_|REDIS_|NATS_)/.test(name)) continue;
    if (["PORT", "HOST", "LOG_LEVEL", "NODE_OPTIONS", "DEBUG"].includes(name)) continue;
    env[name] = value;
  }
  return env;
}

/** A `social-ledger` child; counts its error-level log lines and keeps the first few. */
export class SoakChild {
  readonly proc: ChildProcess;
  errorLines = 0;
  readonly firstErrors: string[] = [];
  exited = false;

  constructor(
    readonly name: string,
    args: readonly string[],
    env: NodeJS.ProcessEnv,
  ) {
    this.proc = spawn(process.execPath, [BIN, ...args], { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    this.proc.on("exit", () => (this.exited = true));
    createInterface({ input: this.proc.stdout! }).on("line", (line) => this.onLine(line));
    createInterface({ input: this.proc.stderr! }).on("line", (line) => this.onStderr(line));
  }

  get pid(): number {
    return this.proc.pid!;
  }

  private onLine(line: string): void {
    let level: number;
    try {
      level = (JSON.parse(line) as { level?: number }).level ?? 0;
    } catch {
      return;
    }
    if (level >= 50) this.recordError(line);
  }

  /** stderr carries serve's banner; anything that looks like a failure counts. */
  private onStderr(line: string): void {
    if (/error|fail|exception/i.test(line)) this.recordError(line);
  }

  private recordError(line: string): void {
    this.errorLines++;
    if (this.firstErrors.length < 5) this.firstErrors.push(`${this.name}: ${line.slice(0, 400)}`);
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const exit = once(this.proc, "exit");
    this.proc.kill("SIGTERM");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 20_000);
    await exit;
    clearTimeout(timer);
  }
}

export const NODE_NAMES = ["serve", "worker", "webhook-worker"] as const;
export type NodeName = (typeof NODE_NAMES)[number];

export interface SoakProcesses {
  cluster: EmbeddedCluster;
  /** The soak's own pool (sampling, the final drain). */
  pool: Pool;
  databaseUrl: string;
  redis: TestRedis;
  redisPid: number;
  /** serve, the second consumer process and the webhook-worker, each with its /metrics. */
  nodes: { name: NodeName; child: SoakChild; metricsUrl: string }[];
  baseUrl: string;
  jwtSecret: string;
  /** The environment the children run with (the final `audit` uses it too). */
  env: NodeJS.ProcessEnv;
  stop(): Promise<void>;
}

const children: SoakChild[] = [];
// Whoever exits (Ctrl-C through bench/lifecycle.ts included): no child left running.
process.on("exit", () => {
  for (const child of children) if (!child.exited) child.proc.kill("SIGKILL");
});

export async function startSoakProcesses(): Promise<SoakProcesses> {
  const root = await clusterTempDir("ledger-soak-");
  started.root = root;
  started.dataDir = path.join(root, "pgdata");
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir });
  const cluster = await started.starting;
  started.cluster = cluster;
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query("CREATE DATABASE soak");
  await admin.end();
  const databaseUrl = cluster.connectionString("soak");
  // Waits as long as it takes on a loaded machine (a sample late is better than none), and keeps its connections open.
  const pool = createPool({
    connectionString: databaseUrl,
    max: 2,
    applicationName: "soak-sampler",
    connectionTimeoutMs: 0,
    idleMs: 3_600_000,
  });
  started.pools.push(pool);

  const redis = await TestRedis.start();
  const probe = createClient({ url: redis.url });
  await probe.connect();
  const redisPid = Number(/process_id:(\d+)/.exec(await probe.info("server"))![1]);
  await probe.close();

  const port = await freePort();
  const jwtSecret = randomBytes(32).toString("hex");
  const env: NodeJS.ProcessEnv = {
    ...cleanEnv(),
    DATABASE_URL: databaseUrl,
    LEDGER_DATA_DIR: path.join(root, "data"),
    LEDGER_JWT_SECRET: jwtSecret,
    LEDGER_PARTITIONS: String(SOAK_SETTINGS.partitions),
    PORT: String(port),
    REDIS_URL: redis.url,
    LOG_LEVEL: "warn",
    LEDGER_WEBHOOK_ALLOW_PRIVATE: "1",
    LEDGER_PRUNE_EVERY_MS: String(SOAK_SETTINGS.pruneEveryMs),
    LEDGER_RETENTION_KEEP_EVENTS: String(SOAK_SETTINGS.keepEvents),
    LEDGER_RETENTION_KEEP_MS: String(SOAK_SETTINGS.keepMs),
    LEDGER_AUDIT_EVERY_MS: String(SOAK_SETTINGS.auditEveryMs),
    LEDGER_DASHBOARD_HISTORY_MS: String(SOAK_SETTINGS.dashboardHistoryMs),
    LEDGER_RECONCILE_INTERVAL_MS: String(SOAK_SETTINGS.reconcileIntervalMs),
    LEDGER_METRICS_REFRESH_MS: "2000",
  };
  const serve = new SoakChild("serve", ["serve"], env);
  children.push(serve);
  const baseUrl = `http://127.0.0.1:${port}`;
  await untilAnswers(`${baseUrl}/readyz`, serve);
  const nodes: SoakProcesses["nodes"] = [{ name: "serve", child: serve, metricsUrl: `${baseUrl}/metrics` }];
  // Started after serve has migrated the database.
  for (const name of ["worker", "webhook-worker"] as const) {
    const metricsPort = await freePort();
    const child = new SoakChild(name, [name, "--metrics-port", String(metricsPort)], env);
    children.push(child);
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    await untilAnswers(metricsUrl, child);
    nodes.push({ name, child, metricsUrl });
  }

  return {
    cluster,
    pool,
    databaseUrl,
    redis,
    redisPid,
    nodes,
    baseUrl,
    jwtSecret,
    env,
    async stop() {
      await Promise.all(nodes.map((n) => n.child.stop()));
      await redis.kill();
    },
  };
}

async function untilAnswers(url: string, child: SoakChild): Promise<void> {
  await pollUntil(
    `${child.name} answers ${url}`,
    async () => {
      if (child.exited) throw new Error(`${child.name} exited during start-up: ${child.firstErrors.join("\n")}`);
      return fetch(url).then(
        (r) => r.ok,
        () => false,
      );
    },
    (ok) => ok,
    120_000,
    200,
  );
}
