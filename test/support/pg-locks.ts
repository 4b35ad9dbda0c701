import type { Pool } from "../../src/db/pool.ts";
import { IS_HOOK_WAIT } from "./sql-hooks.ts";

export interface LockRow {
  locktype: string;
  mode: string;
  granted: boolean;
}

/**
 * Waits until the backend `pid()` shows an ungranted lock in pg_locks: the observable
 * proof that it is blocked, as the chapter checks (a transaction parked at a SQL hook point is
 * not blocked in that sense: its wait is the test's, and is left out here and below). A bounded poll of server state, not a
 * sleep standing in for synchronisation.
 */
export async function waitForLockWait(
  pool: Pool,
  pid: () => number | undefined,
  deadlineMs = 15_000,
): Promise<LockRow> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const current = pid();
    if (current !== undefined) {
      const { rows } = await pool.query<LockRow>(
        `SELECT l.locktype, l.mode, l.granted FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted AND NOT ${IS_HOOK_WAIT}`,
        [current],
      );
      if (rows[0]) return rows[0];
    }
    if (Date.now() > deadline) throw new Error(`no lock wait seen for pid ${current} within ${deadlineMs} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/**
 * Waits until some backend of this database (other than the caller's) waits on a lock. In a
 * test file's own database the only candidates are the transactions the test started.
 */
export async function waitForAnyLockWait(pool: Pool, deadlineMs = 15_000): Promise<LockRow & { pid: number }> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { rows } = await pool.query<LockRow & { pid: number }>(
      `SELECT l.pid, l.locktype, l.mode, l.granted
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE NOT l.granted AND NOT ${IS_HOOK_WAIT} AND a.datname = current_database() AND l.pid <> pg_backend_pid()`,
    );
    if (rows[0]) return rows[0];
    if (Date.now() > deadline) throw new Error(`no lock wait seen within ${deadlineMs} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

export interface OpenTransaction {
  pid: number;
  /** pg_stat_activity.state: 'idle in transaction' between statements, 'active' inside one. */
  state: string;
  /** The transaction id, assigned at its first write or row lock; null for a reader. */
  xid: string | null;
  /** Whether it waits for a lock now. */
  waitingOnLock: boolean;
}

/** The transactions open right now in this database, other than the caller's: what a crash would cut short. */
export async function openTransactions(pool: Pool): Promise<OpenTransaction[]> {
  const { rows } = await pool.query<OpenTransaction>(
    `SELECT pid, state, backend_xid::text AS xid, coalesce(wait_event_type = 'Lock', false) AS "waitingOnLock"
       FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
      ORDER BY pid`,
  );
  return rows;
}

/** One line for a test's note: how many open transactions, how many of them writing, how many waiting on a lock. */
export function formatOpenTransactions(open: readonly OpenTransaction[]): string {
  const writing = open.filter((o) => o.xid !== null).length;
  const waiting = open.filter((o) => o.waitingOnLock).length;
  const idle = open.filter((o) => o.state === "idle in transaction").length;
  return `open transactions=${open.length} (with an xid=${writing}, idle in transaction=${idle}, waiting on a lock=${waiting})`;
}
