import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Config } from "../config.ts";
import { InvalidInputError } from "../errors.ts";

/**
 * A random secret generated once and kept in `dataDir/name` (mode 0600, written only if
 * absent, so two of our processes starting at once agree on one value), read back as text.
 */
export async function readOrCreateSecret(dataDir: string, name: string): Promise<string> {
  const file = path.join(dataDir, name);
  if (!existsSync(file)) {
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    await writeFile(file, randomBytes(32).toString("base64url") + "\n", { mode: 0o600, flag: "wx" }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EEXIST") throw err; // another of our processes wrote it first
    });
  }
  return (await readFile(file, "utf8")).trim();
}

/**
 * The HS256 secret: LEDGER_JWT_SECRET when set (at least 32 bytes), else one generated once
 * and kept (mode 0600) in the data directory, so the embedded default works with no setup
 * and tokens survive restarts.
 */
export async function loadJwtSecret(config: Config): Promise<Uint8Array> {
  if (config.jwtSecret !== undefined) {
    if (Buffer.byteLength(config.jwtSecret) < 32) throw new InvalidInputError("LEDGER_JWT_SECRET", "must be at least 32 bytes");
    return new TextEncoder().encode(config.jwtSecret);
  }
  return new TextEncoder().encode(await readOrCreateSecret(config.dataDir, "jwt-secret"));
}
