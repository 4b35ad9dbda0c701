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

/**
 * A freshness token: the WAL position a write's commit reached and the timeline it was written on
 * (docs/failover.md). A promotion that lost a tail of WAL hands the same positions out again on a
 * new timeline, so the position alone does not name the write. `timeline` is undefined for a token
 * of the older, unqualified form (a position alone), which is still accepted and compared as before.
 */
export interface FreshnessToken {
  timeline: number | undefined;
  lsn: bigint;
}

/** "<timeline>/<lsn>", "2/0/16B3748" (the timeline in decimal, as ledger_timeline() returns it), or a position alone. */
const TOKEN_TEXT = /^(?:([1-9][0-9]{0,9})\/)?([0-9A-Fa-f]{1,8}\/[0-9A-Fa-f]{1,8})$/;

/** TimeLineID is an unsigned 32-bit number in PostgreSQL. */
const MAX_TIMELINE = 0xffffffff;

export function parseFreshnessToken(text: string, field = "freshness"): FreshnessToken {
  const m = TOKEN_TEXT.exec(text);
  const timeline = m?.[1] === undefined ? undefined : Number(m[1]);
  if (!m || (timeline !== undefined && timeline > MAX_TIMELINE))
    throw new InvalidInputError(
      field,
      `must be a freshness token a write answered, such as 2/0/16B3748 (timeline/WAL position) or 0/16B3748, got ${JSON.stringify(text.slice(0, 40))}`,
    );
  return { timeline, lsn: parseLsn(m[2]!, field) };
}

export function formatFreshnessToken(token: FreshnessToken): string {
  return token.timeline === undefined ? formatLsn(token.lsn) : `${token.timeline}/${formatLsn(token.lsn)}`;
}

/**
 * The freshness token of a write, read after its COMMIT has returned (readWalPosition says why this
 * position), with the timeline the primary writes on, in one statement.
 */
export async function readFreshnessToken(db: Pool | PoolClient): Promise<FreshnessToken & { timeline: number }> {
  const { rows } = await db.query<{ timeline: number; lsn: string }>(
    "SELECT ledger_timeline() AS timeline, pg_current_wal_lsn()::text AS lsn",
  );
  return { timeline: rows[0]!.timeline, lsn: parseLsn(rows[0]!.lsn) };
}
