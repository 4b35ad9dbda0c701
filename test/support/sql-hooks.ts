import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { GATE_DEADLINE_MS } from "../../src/hooks.ts";

/**
 * The hook points inside the write functions (ledger_hook, src/db/schema.sql), driven from a test.
 * A test database has `ledger.test_hooks = on` (createTestDatabase, crashLab); `SqlHook.arm`
 * then holds the point's advisory lock, so the first transaction to reach the point parks there,
 * inside the statement production runs, with every lock it took so far; `parked()` sees it wait
 * in pg_locks and returns its pid and the context its NOTICE carried; `release()` lets it go on.
 */
export const HOOK_LOCK_CLASS = 1752133483;

/** SQL that is true for a pg_locks row `l` that is a transaction parked at a hook point: tests' lock-wait polls leave those out. */
export const IS_HOOK_WAIT = `(l.locktype = 'advisory' AND l.classid = ${HOOK_LOCK_CLASS}::oid AND l.objsubid = 2)`;

/** Turns the hook points on in `database` for every session opened after it (run on any connection of the cluster). */
export async function enableSqlHooks(admin: Pool, database: string): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new Error(`unexpected database name ${database}`);
  await admin.query(`ALTER DATABASE ${database} SET ledger.test_hooks = 'on'`);
}

export interface ParkedAt {
  pid: number;
  /** What ledger_hook was given at that point (ids, seq, part, version, ...). */
  context: Record<string, unknown>;
}

interface Arrival extends ParkedAt {
  point: string;
  taken: boolean;
}

/** The NOTICEs ledger_hook sent on the clients of one pool. */
class ArrivalLog {
  readonly arrivals: Arrival[] = [];

  record(message: { message?: string; detail?: string }): void {
    const match = /^ledger_hook (\S+)$/.exec(message.message ?? "");
    if (!match || message.detail === undefined) return;
    const context = JSON.parse(message.detail) as Record<string, unknown>;
    this.arrivals.push({ point: match[1]!, pid: Number(context.pid), context, taken: false });
  }
}

function ignoreError(): void {}

const logs = new WeakMap<Pool, ArrivalLog>();

/**
 * Listens for ledger_hook's NOTICEs on every client `pool` hands out from now on (a client
 * checked out already is listened to at its next checkout). Idempotent.
 */
export function watchSqlHooks(pool: Pool): ArrivalLog {
  let log = logs.get(pool);
  if (log) return log;
  const created = new ArrivalLog();
  const listened = new WeakSet<PoolClient>();
  pool.on("acquire", (client) => {
    if (listened.has(client)) return;
    listened.add(client);
    client.on("notice", (message) => created.record(message));
  });
  logs.set(pool, created);
  log = created;
  return log;
}

export class SqlHook {
  private released = false;

  private constructor(
    readonly point: string,
    private readonly pool: Pool,
    private readonly holder: PoolClient,
    private readonly log: ArrivalLog,
  ) {
    // A server that dies (a crash test) makes the held client emit 'error'; release() then discards it.
    holder.on("error", ignoreError);
  }

  /**
   * Arms `point` for the writers of `pool` (the pool the writes go through: its clients carry
   * the NOTICEs). Until `release()`, the first transaction to reach the point parks there; others
   * pass while it is parked.
   */
  static async arm(pool: Pool, point: string): Promise<SqlHook> {
    const log = watchSqlHooks(pool);
    const holder = await pool.connect();
    try {
      await holder.query("SELECT pg_advisory_lock($1, hashtext($2))", [HOOK_LOCK_CLASS, point]);
    } catch (err) {
      holder.release(true);
      throw err;
    }
    return new SqlHook(point, pool, holder, log);
  }

  /**
   * The next transaction parked at the point: its backend waits (pg_locks, granted = false) on
   * the point's lock, and its NOTICE has arrived. Rejects after `ms` naming the point.
   */
  async parked(ms = GATE_DEADLINE_MS): Promise<ParkedAt> {
    const deadline = Date.now() + ms;
    for (;;) {
      const { rows } = await this.pool.query<{ pid: number }>(
        `SELECT l.pid FROM pg_locks l
          WHERE ${IS_HOOK_WAIT} AND NOT l.granted AND l.objid::bigint = (hashtext($1)::bigint & 4294967295)
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        [this.point],
      );
      const waiting = new Set(rows.map((r) => r.pid));
      const arrival = this.log.arrivals.find((a) => !a.taken && a.point === this.point && waiting.has(a.pid));
      if (arrival) {
        arrival.taken = true;
        return { pid: arrival.pid, context: arrival.context };
      }
      if (Date.now() > deadline) throw new Error(`hook ${this.point}: nobody was parked there within ${ms} ms`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Lets the parked transaction (and every later arrival) go on; after a crash, only returns the dead connection. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    try {
      await this.holder.query("SELECT pg_advisory_unlock($1, hashtext($2))", [HOOK_LOCK_CLASS, this.point]);
      this.holder.off("error", ignoreError);
      this.holder.release();
    } catch {
      this.holder.release(true);
    }
  }
}
