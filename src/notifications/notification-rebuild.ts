import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError, LedgerError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";
import {
  LOCK_RECIPIENTS_SQL,
  NOTIFICATION_COLUMNS,
  NOTIFICATION_SOURCES,
  pendingEventSql,
  type NotificationSourceName,
} from "./notification-sources.ts";

export class NotificationRebuildInProgressError extends LedgerError {
  constructor() {
    super("REBUILD_IN_PROGRESS", "another notification rebuild is running; try again when it has finished");
  }
}

/** Advisory lock key of the notification rebuild ("ntfrbld"). */
export const NOTIFICATION_REBUILD_LOCK_KEY = 0x6e746672626c64n.toString();

/** Per source outbox, per partition: the sequence's last in the rebuild's snapshot. */
export type NotificationSnapshot = Record<NotificationSourceName, number[]>;

/** A row of notification_truth as the snapshot reads it. */
export interface TruthRow {
  source: string;
  actor: string;
  subject: string;
  recipient: string;
  type: string;
  item_id: string | null;
  active: boolean;
  version: number;
  /** As text: a JavaScript Date would round the microseconds the notification id is made of. */
  at: string;
  /** The id the row must have (notification_id of the facts). */
  id: string;
}

interface StoredRow {
  source: string;
  actor: string;
  subject: string;
  type: string;
  active: boolean;
  version: number;
  id: string;
  part: number;
  seq: number;
}

export interface RecipientInstall {
  recipient: string;
  /** Rows whose visible state the install changed although no event of the pair was pending: the view had been wrong. */
  rowsDrifted: number;
  /** Rows it changed that an event not yet consumed explains: lag, not drift. */
  rowsPending: number;
  /** Rows left alone because an event after the snapshot wrote them. */
  rowsNewer: number;
}

export interface NotificationRebuildReport {
  runId: number;
  snapshotSeqs: NotificationSnapshot;
  recipientsChecked: number;
  rowsDrifted: number;
  rowsPending: number;
  /** The recipients with a drifted or pending row. */
  changed: RecipientInstall[];
}

/** The truth rows of some recipients, read in the caller's snapshot. */
export async function readTruthRows(client: PoolClient | Pool, recipients: readonly string[]): Promise<TruthRow[]> {
  const { rows } = await client.query<TruthRow>(
    `SELECT source, actor, subject, recipient, type, item_id, active, version, at::text AS at,
            notification_id(at, source, actor, subject, version) AS id
       FROM notification_truth WHERE recipient = ANY ($1::text[])`,
    [recipients],
  );
  return rows;
}

/** Per source, per partition: the sequences' last, read in the caller's snapshot. */
export async function readSnapshotSeqs(client: PoolClient | Pool): Promise<NotificationSnapshot> {
  const seqs = {} as NotificationSnapshot;
  for (const s of NOTIFICATION_SOURCES) {
    const { rows } = await client.query<{ part: number; last: number }>(
      `SELECT part, last FROM ${s.tables.sequence} ORDER BY part`,
    );
    seqs[s.name] = [];
    for (const r of rows) seqs[s.name][r.part] = r.last;
  }
  return seqs;
}

const SOURCE_OF_ROW: Record<string, NotificationSourceName> = {
  like: "likes",
  relation: "relations",
  comment: "comments",
  post: "posts",
};
/** The most recipients per page of the snapshot read; pacing sizes pages below it (at least MIN_PAGE). */
const PAGE = 500;
const MIN_PAGE = 10;
const keyOf = (r: { source: string; actor: string; subject: string }) =>
  `${r.source}\u0000${r.actor}\u0000${r.subject}`;

/**
 * The notification view rebuilt from the facts (notification_truth), the chapter-32 way: one
 * REPEATABLE READ snapshot reads every outbox partition's last seq S_p and the truth rows, then
 * each recipient is installed in a short transaction that holds the recipient's lock (the one
 * every consumer batch takes, so the install neither waits on rows in a cycle nor loses an
 * event applied meanwhile). Versions play base_seq's part: a pair's row carries the version of
 * the fact state it shows, an event at or below S_p has a version at or below the snapshot's,
 * so once installed it is stale (what COVERED is for a counter), and a row with a higher
 * version was written by an event above S_p and is left alone, as is a row without a snapshot
 * fact whose event seq is above S_p. Inactive pairs are installed as inactive rows, so an old
 * event delivered late cannot bring a notification back. A row the install changes is drift
 * unless an event of its pair is still pending (pendingEventSql, the audit's rule). Hook points:
 * notifications.rebuild.afterSnapshot {snapshotSeqs}, notifications.rebuild.beforeInstall
 * {recipient, pid}, notifications.rebuild.beforeCommit {recipient}.
 */
export class NotificationRebuild {
  private readonly hooks: Hooks;
  readonly pacer: Pacer;

  constructor(
    private readonly pool: Pool,
    options: { hooks?: Hooks; pacing?: PacingOptions } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
    this.pacer = new Pacer(options.pacing ?? DEFAULT_PACING, PAGE, MIN_PAGE);
  }

  async rebuild(options: { recipients?: readonly string[] } = {}): Promise<NotificationRebuildReport> {
    if (options.recipients !== undefined && !Array.isArray(options.recipients)) {
      throw new InvalidInputError("recipients", "must be an array of account ids when given");
    }
    const only = options.recipients?.map((r) => validateId("recipients", r));
    const changed: RecipientInstall[] = [];
    let recipientsChecked = 0;
    const snapshot = await withTransaction(
      this.pool,
      async (snap) => {
        const { rows: lock } = await snap.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS ok", [
          NOTIFICATION_REBUILD_LOCK_KEY,
        ]);
        if (!lock[0]!.ok) throw new NotificationRebuildInProgressError();
        const seqs = await readSnapshotSeqs(snap);
        await this.hooks.at("notifications.rebuild.afterSnapshot", { snapshotSeqs: seqs });
        const { rows: recipients } = await snap.query<{ r: string }>(
          `SELECT r FROM (SELECT recipient AS r FROM notification_truth UNION SELECT recipient FROM notification) x
          WHERE $1::text[] IS NULL OR r = ANY ($1) ORDER BY r`,
          [only ?? null],
        );
        // Paced as the counter rebuild is (docs/counters.md "Pacing the rebuild"): pages sized to the
        // budget from the last full page's read, a rest after each read and each install.
        for (let i = 0; i < recipients.length;) {
          const size = this.pacer.size("page");
          const page = recipients.slice(i, i + size).map((x) => x.r);
          i += page.length;
          const t0 = performance.now();
          const truth = await readTruthRows(snap, page);
          const readMs = performance.now() - t0;
          this.pacer.record("page", size, readMs, page.length === size);
          await rest(this.pacer.restMs(readMs));
          const byRecipient = new Map<string, TruthRow[]>(page.map((r) => [r, []]));
          for (const t of truth) byRecipient.get(t.recipient)!.push(t);
          for (const [recipient, rows] of byRecipient) {
            const t1 = performance.now();
            const installed = await this.installRecipient(recipient, rows, seqs);
            recipientsChecked++;
            if (installed.rowsDrifted + installed.rowsPending > 0) changed.push(installed);
            await rest(this.pacer.restMs(performance.now() - t1));
          }
        }
        return seqs;
      },
      { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 },
    );
    const rowsDrifted = changed.reduce((n, c) => n + c.rowsDrifted, 0);
    const rowsPending = changed.reduce((n, c) => n + c.rowsPending, 0);
    const { rows } = await this.pool.query<{ run_id: number }>(
      "INSERT INTO notification_rebuild_run (snapshot_seqs, recipients_checked, rows_drifted, rows_pending) VALUES ($1, $2, $3, $4) RETURNING run_id",
      [JSON.stringify(snapshot), recipientsChecked, rowsDrifted, rowsPending],
    );
    return { runId: rows[0]!.run_id, snapshotSeqs: snapshot, recipientsChecked, rowsDrifted, rowsPending, changed };
  }

  /** Installs one recipient's rows from its snapshot truth rows. */
  async installRecipient(
    recipient: string,
    truth: readonly TruthRow[],
    snapshot: NotificationSnapshot,
  ): Promise<RecipientInstall> {
    return withTransaction(this.pool, async (client) => {
      await client.query(LOCK_RECIPIENTS_SQL, [[recipient]]);
      await this.hooks.at("notifications.rebuild.beforeInstall", { recipient, pid: backendPid(client) });
      // Read after the lock: every batch that wrote this recipient's rows before has committed.
      const { rows: stored } = await client.query<StoredRow>(
        "SELECT source, actor, subject, type, active, version, id, part, seq FROM notification WHERE recipient = $1",
        [recipient],
      );
      const current = new Map(stored.map((r) => [keyOf(r), r]));
      const install: TruthRow[] = [];
      const remove: StoredRow[] = [];
      const changedKeys: { source: string; actor: string; subject: string }[] = [];
      let rowsNewer = 0;
      for (const t of truth) {
        const cur = current.get(keyOf(t));
        current.delete(keyOf(t));
        if (cur && cur.version > t.version) {
          rowsNewer++;
          continue;
        }
        // Already what the facts say (the id carries the time): nothing to write.
        if (cur && cur.version === t.version && cur.active === t.active && cur.type === t.type && cur.id === t.id)
          continue;
        install.push(t);
        if (!cur ? t.active : cur.active !== t.active || (t.active && cur.type !== t.type)) changedKeys.push(t);
      }
      for (const cur of current.values()) {
        if (cur.seq > (snapshot[SOURCE_OF_ROW[cur.source]!][cur.part] ?? 0)) {
          rowsNewer++;
          continue;
        }
        remove.push(cur);
        if (cur.active) changedKeys.push(cur);
      }
      // Asked under the recipient lock: no batch can consume one of these pairs' events meanwhile.
      const { rows: judged } =
        changedKeys.length === 0
          ? { rows: [{ pending: 0 }] }
          : await client.query<{ pending: number }>(
              `SELECT count(*) FILTER (WHERE ${pendingEventSql("k")})::int AS pending
           FROM unnest($1::text[], $2::text[], $3::text[]) AS k(source, actor, subject)`,
              [changedKeys.map((k) => k.source), changedKeys.map((k) => k.actor), changedKeys.map((k) => k.subject)],
            );
      const rowsPending = judged[0]!.pending;
      if (install.length > 0) {
        await client.query(
          `INSERT INTO notification AS n (${NOTIFICATION_COLUMNS})
           SELECT t.source, t.actor, t.subject, $1, t.type, t.item_id, t.active, t.version, t.at,
                  notification_id(t.at, t.source, t.actor, t.subject, t.version),
                  notification_group_key(t.type, t.item_id, t.at, notification_id(t.at, t.source, t.actor, t.subject, t.version)), 0, 0
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::boolean[], $8::bigint[], $9::timestamptz[])
                  AS t(source, actor, subject, type, item_id, active, version, at)
            ORDER BY t.source, t.actor, t.subject
           ON CONFLICT (source, actor, subject, recipient) DO UPDATE
              SET type = EXCLUDED.type, item_id = EXCLUDED.item_id, active = EXCLUDED.active, version = EXCLUDED.version,
                  at = EXCLUDED.at, id = EXCLUDED.id, group_key = EXCLUDED.group_key, part = 0, seq = 0
            WHERE n.version <= EXCLUDED.version`,
          [
            recipient,
            install.map((t) => t.source),
            install.map((t) => t.actor),
            install.map((t) => t.subject),
            install.map((t) => t.type),
            install.map((t) => t.item_id),
            install.map((t) => t.active),
            install.map((t) => t.version),
            install.map((t) => t.at),
          ],
        );
      }
      if (remove.length > 0) {
        await client.query(
          `DELETE FROM notification n USING unnest($2::text[], $3::text[], $4::text[]) AS k(source, actor, subject)
            WHERE n.source = k.source AND n.actor = k.actor AND n.subject = k.subject AND n.recipient = $1`,
          [recipient, remove.map((r) => r.source), remove.map((r) => r.actor), remove.map((r) => r.subject)],
        );
      }
      await this.hooks.at("notifications.rebuild.beforeCommit", { recipient });
      return { recipient, rowsDrifted: changedKeys.length - rowsPending, rowsPending, rowsNewer };
    });
  }
}
