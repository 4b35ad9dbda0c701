import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { link, mkdir, readFile, unlink, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Config } from "../config.ts";
import { InvalidInputError } from "../errors.ts";

/**
 * A random secret generated once and kept in `dataDir/name` (mode 0600), read back as text.
 * The file appears whole or not at all: the value is written to a private temporary file that
 * is then hard-linked to its name, which fails with EEXIST if another of our processes got
 * there first (both then read that one). Creating the name first and writing into it would
 * let a second process read it empty in between (two `token` commands on a fresh data dir).
 */
export async function readOrCreateSecret(dataDir: string, name: string): Promise<string> {
  const file = path.join(dataDir, name);
  if (!existsSync(file)) {
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    const draft = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
    await writeFile(draft, randomBytes(32).toString("base64url") + "\n", { mode: 0o600, flag: "wx" });
    try {
      await link(draft, file).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "EEXIST") throw err; // another of our processes published it first
      });
    } finally {
      await unlink(draft);
    }
  }
  return (await readFile(file, "utf8")).trim();
}

/** Where the HS256 secret comes from: LEDGER_JWT_SECRET, or the file the data directory keeps it in. */
export function jwtSecretSource(config: Config): { kind: "environment" } | { kind: "file"; file: string } {
  return config.jwtSecret !== undefined
    ? { kind: "environment" }
    : { kind: "file", file: path.resolve(config.dataDir, "jwt-secret") };
}

/**
 * The HS256 secret: LEDGER_JWT_SECRET when set (at least 32 bytes), else one generated once
 * and kept (mode 0600) in the data directory, so the embedded default works with no setup
 * and tokens survive restarts.
 */
export async function loadJwtSecret(config: Config): Promise<Uint8Array> {
  if (config.jwtSecret !== undefined) {
    if (Buffer.byteLength(config.jwtSecret) < 32)
      throw new InvalidInputError("LEDGER_JWT_SECRET", "must be at least 32 bytes");
    return new TextEncoder().encode(config.jwtSecret);
  }
  return new TextEncoder().encode(await readOrCreateSecret(config.dataDir, "jwt-secret"));
}
