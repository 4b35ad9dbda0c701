import { existsSync, statSync } from "node:fs";
import { chmod, chown, mkdir, stat } from "node:fs/promises";
import path from "node:path";
import { postgresOsUser } from "../db/embedded-cluster.ts";
import { LedgerError } from "../errors.ts";
import { APP_PASSWORD_FILE, SUPERUSER_PASSWORD_FILE } from "./embedded-access.ts";

/** The data directory cannot hold the embedded cluster; the message says why and what to do. */
export class DataDirectoryError extends LedgerError {
  constructor(message: string) {
    super("DATA_DIRECTORY", message);
  }
}

/**
 * Checked before anything is created in the data directory. As root, the embedded PostgreSQL
 * runs as the `postgres` user, which must be able to enter every directory on the way to its
 * data (a `mktemp -d` parent is mode 0700): otherwise initdb fails with a long trace and leaves
 * a half-made `pg/` behind. The data directory itself is made traversable for that user by
 * `secureDataDirectory`, for it alone.
 */
export function checkDataDirectory(dataDir: string): void {
  if (process.getuid?.() !== 0) return;
  // Until the user exists (secureDataDirectory creates it), only the "others" bits can let it in.
  const uid = postgresOsUser()?.uid;
  const parts = path.resolve(dataDir).split(path.sep).filter(Boolean);
  for (let i = 0; i < parts.length; i++) {
    const dir = path.sep + parts.slice(0, i).join(path.sep);
    let stat;
    try {
      stat = statSync(dir);
    } catch {
      return; // created below with mode 0755 by us
    }
    if (!stat.isDirectory()) throw new DataDirectoryError(`LEDGER_DATA_DIR ${dataDir}: ${dir} is not a directory`);
    const traversable = stat.uid === uid ? (stat.mode & 0o100) !== 0 : (stat.mode & 0o001) !== 0;
    if (!traversable) {
      throw new DataDirectoryError(
        `LEDGER_DATA_DIR ${dataDir}: the embedded PostgreSQL runs as user postgres (this process is root) and cannot enter ${dir} ` +
          `(mode ${(stat.mode & 0o777).toString(8).padStart(4, "0")}); choose a directory every user can traverse, or run: chmod o+x ${dir}`,
      );
    }
  }
}

/** Every file the service writes in the data directory besides the cluster (`pg/`, which initdb makes 0700). */
const PRIVATE_FILES = [
  "jwt-secret",
  SUPERUSER_PASSWORD_FILE,
  APP_PASSWORD_FILE,
  "pg-port",
  "postgresql.log",
  "owner.pid",
];

/**
 * Makes the data directory private (other local users could read the port file and the server's
 * log, 0644, in a 0755 directory) and its files 0600, also those of a directory made by an older version.
 * Not root: the server runs as this process's user, so the directory is 0700. Root: the server
 * runs as the OS user `postgres`, which must reach `pg/` (its own, mode 0700) through the data
 * directory. The directory then keeps its owner, gets the group `postgres` and mode 0710: the
 * server may pass through it to `pg/` but cannot list it or read our files (0600, root's), and
 * other users cannot enter it at all.
 */
export async function secureDataDirectory(dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const server = postgresOsUser({ create: true });
  try {
    if (server) {
      await chown(dataDir, (await stat(dataDir)).uid, server.gid);
      await chmod(dataDir, 0o710);
    } else {
      await chmod(dataDir, 0o700);
    }
    for (const name of PRIVATE_FILES) {
      const file = path.join(dataDir, name);
      if (existsSync(file)) await chmod(file, 0o600);
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "EPERM") throw err;
    throw new DataDirectoryError(
      `LEDGER_DATA_DIR ${dataDir}: cannot make it private to this user (${(err as Error).message}); run the service as the owner of the directory`,
    );
  }
}
