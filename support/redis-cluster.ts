import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, mkdir, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { pollUntil } from "./poll.ts";

const run = promisify(execFile);

/**
 * Whether `port` can be listened on now. One promise settles on the first of "listening" and
 * "error": `events.once(server, "listening")` would reject on the error and win a race against it.
 */
export async function portIsFree(port: number): Promise<boolean> {
  const server = createServer();
  const listening = await new Promise<boolean>((resolve) => {
    server.once("error", () => resolve(false));
    server.once("listening", () => resolve(true));
    server.listen(port, "127.0.0.1");
  });
  if (listening) {
    server.close();
    await once(server, "close");
  }
  return listening;
}

/** A free port whose cluster bus port (port + 10000) is free too; the OS picks it, so never 6379. */
export async function freeClusterPort(taken: Set<number>): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const server = createServer();
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as { port: number };
    server.close();
    await once(server, "close");
    if (port + 10000 > 65535 || taken.has(port) || taken.has(port + 10000)) continue;
    if (await portIsFree(port + 10000)) return port;
  }
  throw new Error("no free port pair (port, port + 10000) for a cluster node");
}

export interface ClusterNodeInfo {
  port: number;
  role: "master" | "replica";
  /** A replica's master's port. */
  masterPort?: number;
  /** A node the others mark failed (fail or fail?). */
  failed: boolean;
}

/**
 * A throwaway Redis Cluster from the system binaries: `masters` masters with one replica each,
 * every node a `redis-server --cluster-enabled yes` on a free port (and bus port) with its own
 * temporary directory and no persistence, joined with `redis-cli --cluster create`. A short
 * cluster-node-timeout makes a failover after a kill take about a second. `stop` kills every
 * node this started and removes the directory.
 */
export class TestRedisCluster {
  private readonly children = new Map<number, ChildProcess>();

  private constructor(
    readonly dir: string,
    readonly ports: readonly number[],
  ) {}

  /** The REDIS_URL of the count layer: every node as a seed. */
  get url(): string {
    return `redis+cluster://${this.ports.map((p) => `127.0.0.1:${p}`).join(",")}`;
  }

  static async start(options: { masters?: number; nodeTimeoutMs?: number } = {}): Promise<TestRedisCluster> {
    const masters = options.masters ?? 3;
    const taken = new Set<number>();
    const ports: number[] = [];
    for (let i = 0; i < masters * 2; i++) {
      const port = await freeClusterPort(taken);
      taken.add(port).add(port + 10000);
      ports.push(port);
    }
    const cluster = new TestRedisCluster(await mkdtemp(join(tmpdir(), "ledger-redis-cluster-")), ports);
    try {
      for (const port of ports) await cluster.spawnNode(port, options.nodeTimeoutMs ?? 1000);
      for (const port of ports)
        await pollUntil(
          `redis-server ${port} answers`,
          () => cluster.cli(port, "PING").catch(() => ""),
          (r) => r === "PONG",
          15_000,
          50,
        );
      await run(
        "redis-cli",
        ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-replicas", "1", "--cluster-yes"],
        { timeout: 60_000 },
      );
      await cluster.waitHealthy();
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  private async spawnNode(port: number, nodeTimeoutMs: number): Promise<void> {
    const dir = join(this.dir, String(port));
    await mkdir(dir, { recursive: true });
    const child = spawn(
      "redis-server",
      [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        join(dir, "nodes.conf"),
        "--cluster-node-timeout",
        String(nodeTimeoutMs),
        "--dir",
        dir,
        "--save",
        "",
        "--appendonly",
        "no",
      ],
      { stdio: "ignore" },
    );
    this.children.set(port, child);
  }

  /** One command on one node through redis-cli (trimmed raw output). */
  async cli(port: number, ...args: string[]): Promise<string> {
    const { stdout } = await run("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], { timeout: 5_000 });
    return stdout.trim();
  }

  alive(port: number): boolean {
    const child = this.children.get(port);
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  }

  /** Every node as a live node sees it (CLUSTER NODES). */
  async topology(): Promise<ClusterNodeInfo[]> {
    const from = this.ports.find((p) => this.alive(p));
    if (from === undefined) throw new Error("no cluster node is alive");
    const lines = (await this.cli(from, "CLUSTER", "NODES")).split("\n").filter((l) => l.length > 0);
    const byId = new Map(
      lines.map((l) => {
        const [id, address] = l.split(" ") as [string, string];
        return [id, Number(address.split("@")[0]!.split(":")[1])];
      }),
    );
    return lines.map((l) => {
      const [, address, flags, masterId] = l.split(" ") as [string, string, string, string];
      const port = Number(address.split("@")[0]!.split(":")[1]);
      const replica = flags.includes("slave");
      return {
        port,
        role: replica ? "replica" : "master",
        masterPort: replica ? byId.get(masterId) : undefined,
        failed: flags.includes("fail"),
      };
    });
  }

  /**
   * The live nodes that are masters by their own word (ROLE), not by one node's CLUSTER NODES view,
   * which can still list a master demoted by a failover a moment ago.
   */
  async masterPorts(): Promise<number[]> {
    const out: number[] = [];
    for (const port of this.ports.filter((p) => this.alive(p))) {
      if ((await this.cli(port, "ROLE").catch(() => "")).startsWith("master")) out.push(port);
    }
    return out.sort((a, b) => a - b);
  }

  /**
   * A live replica of the master at `masterPort`, by the replica's own word (ROLE: slave, its
   * master's address, link state "connected"). Polled (bounded): right after a failover the demoted
   * master may still be reconnecting to its new master.
   */
  async replicaOf(masterPort: number, timeoutMs = 15_000): Promise<number> {
    const find = async (): Promise<number | undefined> => {
      for (const port of this.ports.filter((p) => this.alive(p) && p !== masterPort)) {
        const [role, , master, state] = (await this.cli(port, "ROLE").catch(() => "")).split("\n").map((l) => l.trim());
        if (role === "slave" && Number(master) === masterPort && state === "connected") return port;
      }
      return undefined;
    };
    return (await pollUntil(`a live replica of ${masterPort}`, find, (found) => found !== undefined, timeoutMs, 100))!;
  }

  /** Keys matching `pattern` stored on the node at `port` (SCAN is node-local: no redirection). */
  async keysOn(port: number, pattern: string): Promise<string[]> {
    const out = await this.cli(port, "--scan", "--pattern", pattern);
    return out.length === 0 ? [] : out.split("\n");
  }

  /**
   * Bounded poll until every live node says cluster_state:ok, every slot is served by a live
   * master, and every live replica's link to its master is up (so a failover has data to promote).
   */
  async waitHealthy(timeoutMs = 30_000): Promise<void> {
    await pollUntil(
      "the Redis Cluster is healthy",
      async () => {
        const live = this.ports.filter((p) => this.alive(p));
        for (const port of live) {
          const info = await this.cli(port, "CLUSTER", "INFO").catch(() => "");
          if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_ok:16384")) return false;
        }
        const nodes = await this.topology().catch(() => []);
        const masters = nodes.filter((n) => n.role === "master" && this.alive(n.port) && !n.failed);
        if (masters.length * 2 < live.length) return false;
        for (const n of nodes.filter((x) => x.role === "replica" && this.alive(x.port))) {
          const replication = await this.cli(n.port, "INFO", "replication").catch(() => "");
          if (!replication.includes("master_link_status:up")) return false;
        }
        return true;
      },
      (ok) => ok,
      timeoutMs,
      100,
    );
  }

  /** SIGKILL one node and wait for its exit. */
  async kill(port: number): Promise<void> {
    const child = this.children.get(port);
    if (!child || !this.alive(port)) return;
    const exited = once(child, "exit");
    child.kill("SIGKILL");
    await exited;
  }

  /** Bounded poll until the node at `port` reports itself a master (after a failover). */
  async waitMaster(port: number, timeoutMs = 30_000): Promise<void> {
    await pollUntil(
      `node ${port} becomes a master`,
      () => this.cli(port, "ROLE").catch(() => ""),
      (r) => r.startsWith("master"),
      timeoutMs,
      50,
    );
  }

  async stop(): Promise<void> {
    for (const port of this.children.keys()) await this.kill(port);
    await rm(this.dir, { recursive: true, force: true });
  }
}
