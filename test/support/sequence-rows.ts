import type { Pool, PoolClient } from "../../src/db/pool.ts";

/**
 * Which sequence rows (like_seq, event_seq, comment_seq: one row per partition) a blocked writer
 * holds, seen from outside: the order a writer takes them in is the deadlock argument of the
 * write path and of the erasure (rows of several partitions, always ascending). The like counter's
 * watermark rows (counter_watermark) are the same argument for a consumer's round. A test holds
 * one partition's row in a transaction of its own (`holdSequenceRow`), lets the writer run into
 * it (its wait shows in pg_locks), and asks of every other row whether someone holds it
 * (`sequenceRowHeld`, a NOWAIT probe that takes nothing it keeps).
 */
export type SequenceTable = "like_seq" | "event_seq" | "comment_seq" | "counter_watermark";

const LOCK_ROW: Record<SequenceTable, string> = {
  like_seq: "SELECT part FROM like_seq WHERE part = $1 FOR UPDATE",
  event_seq: "SELECT part FROM event_seq WHERE part = $1 FOR UPDATE",
  comment_seq: "SELECT part FROM comment_seq WHERE part = $1 FOR UPDATE",
  counter_watermark: "SELECT part FROM counter_watermark WHERE part = $1 FOR UPDATE",
};

const LOCK_NOT_AVAILABLE = "55P03";

export interface HeldRow {
  /** The holding backend and its transaction id (what a writer that runs into the row waits for). */
  pid: number;
  xid: string;
  /** Commits the holder's transaction (it wrote nothing) and returns its connection. Idempotent. */
  release(): Promise<void>;
}

/** Locks `table`'s row of partition `part` in a transaction of its own, until `release()`. */
export async function holdSequenceRow(pool: Pool, table: SequenceTable, part: number): Promise<HeldRow> {
  const client: PoolClient = await pool.connect();
  try {
    await client.query("BEGIN");
    const { rowCount } = await client.query(LOCK_ROW[table], [part]);
    if (rowCount !== 1) throw new Error(`${table} has no row for partition ${part}`);
    const { rows } = await client.query<{ pid: number; xid: string }>(
      "SELECT pg_backend_pid() AS pid, pg_current_xact_id()::xid::text AS xid",
    );
    let released = false;
    return {
      pid: rows[0]!.pid,
      xid: rows[0]!.xid,
      async release() {
        if (released) return;
        released = true;
        try {
          await client.query("COMMIT");
          client.release();
        } catch {
          client.release(true);
        }
      },
    };
  } catch (err) {
    await client.query("ROLLBACK").catch(() => undefined);
    client.release();
    throw err;
  }
}

/** Whether another transaction holds a lock on `table`'s row of partition `part` right now: a NOWAIT probe, rolled back. */
export async function sequenceRowHeld(pool: Pool, table: SequenceTable, part: number): Promise<boolean> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    try {
      await client.query(`${LOCK_ROW[table]} NOWAIT`, [part]);
      return false;
    } catch (err) {
      if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return true;
      throw err;
    }
  } finally {
    await client.query("ROLLBACK").catch(() => undefined);
    client.release();
  }
}

/**
 * Waits until backend `pid` waits for the transaction `xid` (a row lock that transaction holds):
 * a bounded poll of pg_locks, rejecting with `what` in the message.
 */
export async function waitUntilWaitingFor(
  pool: Pool,
  pid: () => number | undefined,
  xid: string,
  what: string,
  deadlineMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const current = pid();
    if (current !== undefined) {
      const { rows } = await pool.query(
        "SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted AND locktype = 'transactionid' AND transactionid::text = $2",
        [current, xid],
      );
      if (rows.length > 0) return;
    }
    if (Date.now() > deadline)
      throw new Error(
        `${what}: backend ${current} was not seen waiting for transaction ${xid} within ${deadlineMs} ms`,
      );
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** The first id `prefix`N (N from 1) whose partition of `partitions` is `part`. */
export async function keyInPartition(pool: Pool, partitions: number, part: number, prefix: string): Promise<string> {
  const { rows } = await pool.query<{ k: string }>(
    "SELECT $3 || i AS k FROM generate_series(1, 10000) i WHERE ledger_partition($3 || i, $1) = $2 ORDER BY i LIMIT 1",
    [partitions, part, prefix],
  );
  if (!rows[0]) throw new Error(`no key ${prefix}N in partition ${part} of ${partitions}`);
  return rows[0].k;
}

/** The backend (other than the holder) that waits for transaction `xid`, once one does: a bounded poll of pg_locks, rejecting with `what`. */
export async function waiterFor(pool: Pool, xid: string, what: string, deadlineMs = 15_000): Promise<number> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { rows } = await pool.query<{ pid: number }>(
      "SELECT pid FROM pg_locks WHERE NOT granted AND locktype = 'transactionid' AND transactionid::text = $1 LIMIT 1",
      [xid],
    );
    if (rows[0]) return rows[0].pid;
    if (Date.now() > deadline)
      throw new Error(`${what}: nobody was seen waiting for transaction ${xid} within ${deadlineMs} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}
