import type { Pool, PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";

/** A pg_lsn as text: two hexadecimal halves, "16/B374D848" (what PostgreSQL prints). */
const LSN_TEXT = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** The position's 64-bit value, for comparing positions without a database round trip. */
export function parseLsn(text: string, field = "freshness"): bigint {
  const m = LSN_TEXT.exec(text);
  if (!m)
    throw new InvalidInputError(
      field,
      `must be a WAL position such as 0/16B3748 (a freshness token a write answered), got ${JSON.stringify(text.slice(0, 40))}`,
    );
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

export function formatLsn(value: bigint): string {
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xffffffffn).toString(16).toUpperCase()}`;
}

/**
 * The freshness token of a write, read after its COMMIT has returned: the primary's WAL write
 * position, `pg_current_wal_lsn()`. With synchronous_commit on (this project never turns it
 * off), COMMIT returns only after the commit record is flushed, and flushing moves the write
 * position past it in shared memory, so a read from any session afterwards is >= the end of the
 * commit record; a standby whose `pg_last_wal_replay_lsn()` (the end of the last record it
 * replayed) is >= this value has replayed the commit. `pg_current_wal_insert_lsn()` would also
 * cover the commit, but it can name WAL that is not written yet (and, at a page boundary, a
 * position past the page header that no replay position ever equals until more WAL arrives),
 * so a token from it could make a caught-up replica look behind (docs/read-replicas.md).
 */
export async function readWalPosition(db: Pool | PoolClient): Promise<string> {
  const { rows } = await db.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
  return rows[0]!.lsn;
}
