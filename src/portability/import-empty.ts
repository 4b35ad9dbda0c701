import { UniqueViolationError, mapPgError } from "../db/errors.ts";
import type { PoolClient } from "../db/pool.ts";
import { LedgerError } from "../errors.ts";
import { REBUILD_LOCK_KEY } from "../likes/like-rebuild.ts";

/** `--empty-ledger` on a ledger that holds items or likes (or an erasure running, or as a role that does not own the like tables): nothing was written. */
export class LedgerNotEmptyError extends LedgerError {
  constructor(detail: string) {
    super(
      "LEDGER_NOT_EMPTY",
      `the empty-ledger import needs a ledger without items, likes or a running erasure (and the like tables' owner): ${detail}; import without --empty-ledger`,
    );
  }
}

/**
 * The like side is empty: no item, no like fact, event, baseline or count, and no erasure
 * running (the erasure guard on like_fact is then a no-op for every row, so the load may leave it
 * out). Asked once without locks (auto mode: is the fast path worth locking for?) and once under
 * LOCK_LIKE_SIDE, which makes the answer hold until the commit.
 */
const LIKE_SIDE_STATE = `
  SELECT EXISTS (SELECT 1 FROM item) AS items, EXISTS (SELECT 1 FROM like_fact) AS likes,
         EXISTS (SELECT 1 FROM like_outbox) OR EXISTS (SELECT 1 FROM like_outbox_pruned) OR EXISTS (SELECT 1 FROM like_count) AS history,
         EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) AS erasing,
         -- Setting indexes and keys aside is the tables' owner's to do: a role that only writes them takes the batches.
         EXISTS (SELECT 1 FROM pg_class c WHERE c.oid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass)
                    AND NOT pg_has_role(current_user, c.relowner, 'USAGE')) AS not_owner`;

/**
 * Every table the load writes or re-checks, in one statement (one lock order), in a mode no
 * other writer shares: live likes, item writes and consumers of these tables wait for the commit;
 * reads go on until the index drop below takes like_fact itself. account_erasure in SHARE mode:
 * no erasure starts or ends meanwhile. Then the like rebuild's advisory key, as the resumable
 * likes phase holds it (a rebuild's snapshot must not straddle facts that bring no events).
 */
const LOCK_LIKE_SIDE = [
  "LOCK TABLE item, like_fact, like_count, like_outbox, like_outbox_pruned, like_seq IN SHARE ROW EXCLUSIVE MODE",
  "LOCK TABLE account_erasure IN SHARE MODE",
  `SELECT pg_advisory_xact_lock(${REBUILD_LOCK_KEY})`,
] as const;

/**
 * What the load sets aside and restores, as the catalog defines it (so the restored schema is the
 * migrations' to the byte): every index and constraint of like_fact, like_outbox_pruned and
 * like_count except NOT NULL and CHECK ones. Each index is then built once from the sorted rows
 * instead of taking a random-order btree insert per row; each foreign key is validated by one
 * set-based join instead of a trigger call per row. Primary keys are restored first (unique
 * indexes: a duplicate would fail the build, but the load writes one row per pair, item or
 * (item, partition)), then the other indexes, then the foreign keys, which are checked against
 * the referenced tables' own keys (never set aside).
 */
const SET_ASIDE = `
  SELECT drop, restore FROM (
    SELECT 0 AS rank, c.conname::text AS name,
           format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname) AS drop,
           format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid)) AS restore
      FROM pg_constraint c WHERE c.conrelid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass) AND c.contype IN ('p', 'u')
    UNION ALL
    SELECT 1, i.indexrelid::regclass::text, format('DROP INDEX %s', i.indexrelid::regclass), pg_get_indexdef(i.indexrelid)
      FROM pg_index i WHERE i.indrelid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass)
       AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
    UNION ALL
    SELECT 2, c.conname::text, format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname),
           format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
      FROM pg_constraint c WHERE c.conrelid IN ('like_fact'::regclass, 'like_count'::regclass) AND c.contype = 'f') x
   ORDER BY rank, name`;

/** The schema of the set-aside tables as the catalog prints it, compared before and after the load. */
export const LIKE_SIDE_SCHEMA = `
  SELECT string_agg(def, E'\n' ORDER BY def) AS schema FROM (
    SELECT c.conname || ': ' || pg_get_constraintdef(c.oid) AS def FROM pg_constraint c
     WHERE c.conrelid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass)
    UNION ALL
    SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass)
    UNION ALL
    SELECT t.tgname || ': ' || t.tgenabled::text FROM pg_trigger t WHERE NOT t.tgisinternal AND t.tgrelid IN ('like_fact'::regclass, 'like_outbox_pruned'::regclass, 'like_count'::regclass)) d`;

/** The erasure guard is a no-op while no erasure runs (checked under the lock above). */
const GUARD_OFF = "ALTER TABLE like_fact DISABLE TRIGGER like_fact_erasure_guard";
const GUARD_ON = "ALTER TABLE like_fact ENABLE TRIGGER like_fact_erasure_guard";

/** The file's items, plain, as INSERT_ITEMS makes them. */
const LOAD_ITEMS = `
  WITH ins AS (INSERT INTO item (item_id, kind) SELECT DISTINCT a, 'plain' FROM import_lines WHERE kind = 'item' ORDER BY 1 RETURNING 1)
  SELECT count(*)::int AS written FROM ins`;

/**
 * Each like line as its fact (liked, version 1, its `at` or $1 the import time), in the file's
 * order: nothing is there to conflict with (the like side is empty and locked), and the primary
 * key is built right after, which is also the check that no pair came twice (DROP_LATER_LINES).
 */
const LOAD_LIKES = `
  INSERT INTO like_fact (user_id, item_id, liked, version, changed_at)
  SELECT a, b, true, 1, coalesce(at, $1) FROM import_lines WHERE kind = 'like'`;

/**
 * A file that gives a pair twice: each pair's first line is its fact (the rule of the resumable
 * path), so the later lines leave import_lines, and from here on its like lines are the facts.
 */
const DROP_LATER_LINES = `
  DELETE FROM import_lines l USING import_lines e
   WHERE l.kind = 'like' AND e.kind = 'like' AND e.a = l.a AND e.b = l.b AND e.line < l.line`;

const LIKE_FACT_KEY = "like_fact_pkey";

/**
 * One history baseline per fact (one event, pruned), as the resumable path writes it. Read from
 * import_lines, whose like lines are the facts now: a temporary table in local buffers, not the
 * just-written heap of like_fact.
 */
const LOAD_BASELINES = `
  INSERT INTO like_outbox_pruned (user_id, item_id, events, delta_sum, max_version)
  SELECT a, b, 1, 1, 1 FROM import_lines WHERE kind = 'like'`;

/**
 * The counts per (item, user partition) ($1 P), hashed in memory. Computing the partition once
 * per user and joining it back was slower (measured: 8.7-9.0 s against 4.1-6.2 s at 1M likes).
 */
const LOAD_COUNTS = `
  INSERT INTO like_count (item_id, part, n)
  SELECT b, ledger_partition(a, $1), count(*) FROM import_lines WHERE kind = 'like' GROUP BY 1, 2`;

/** The point a test parks the load at, after the rows are in and before the index builds (docs/testing.md, "Hook points"). */
const HOOK =
  "SELECT ledger_hook('import.emptyLedgerLoaded', jsonb_build_object('likes', $1::int)) WHERE current_setting('ledger.test_hooks', true) = 'on'";

export interface LikeSide {
  empty: boolean;
  /** Why not, in words (for LEDGER_NOT_EMPTY). */
  detail: string;
}

export async function likeSideState(client: PoolClient): Promise<LikeSide> {
  const r = (
    await client.query<{ items: boolean; likes: boolean; history: boolean; erasing: boolean; not_owner: boolean }>(
      LIKE_SIDE_STATE,
    )
  ).rows[0]!;
  const why = [
    r.items && "it has items",
    r.likes && "it has likes",
    r.history && "it has like history or counts",
    r.erasing && "an erasure is running",
    r.not_owner && `the connected role does not own like_fact, like_outbox_pruned and like_count`,
  ].filter(Boolean);
  return { empty: why.length === 0, detail: why.join(", ") };
}

/** Locks the like side for the rest of the transaction and asks again whether it is empty. */
export async function lockLikeSide(client: PoolClient): Promise<LikeSide> {
  for (const text of LOCK_LIKE_SIDE) await client.query(text);
  return likeSideState(client);
}

export interface EmptyLoad {
  items: number;
  likes: number;
}

/**
 * Loads the file's items and likes (from import_lines, checked) into a locked, empty like side,
 * inside the staging transaction: the facts sorted, their baselines and counts set-based, then
 * like_fact's list indexes built and the foreign keys re-validated whole. One transaction: a kill
 * leaves nothing, and the ledger is as empty as before, so the same command starts again.
 * `timed` is called with each step's name, milliseconds and, for the items and facts, the rows written.
 */
export async function loadEmptyLikeSide(
  client: PoolClient,
  importedAt: Date,
  partitions: number,
  timed: (step: string, ms: number, lines?: number) => void,
): Promise<EmptyLoad> {
  const step = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    const result = await work();
    timed(name, performance.now() - started, typeof result === "number" ? result : undefined);
    return result;
  };
  // The index builds sort in memory, and the GROUP BY of the counts hashes there.
  await client.query("SET LOCAL maintenance_work_mem = '512MB'");
  await client.query("SET LOCAL work_mem = '256MB'");
  const { rows: aside } = await client.query<{ drop: string; restore: string }>(SET_ASIDE);
  await step("empty: set aside indexes, keys and the erasure guard", async () => {
    // Foreign keys first: a primary key is dropped after the keys that lean on it.
    for (const a of [...aside].reverse()) await client.query(a.drop);
    await client.query(GUARD_OFF);
  });
  const items = await step(
    "empty: items",
    async () => (await client.query<{ written: number }>(LOAD_ITEMS)).rows[0]!.written,
  );
  // The fact table's key first: built on the rows as the file gives them, it fails on a pair given
  // twice, and then the rows are loaded again with each pair's first line only.
  const key = aside.find((a) => a.drop.endsWith(` ${LIKE_FACT_KEY}`))!;
  await client.query("SAVEPOINT import_likes");
  let likes: number;
  try {
    likes = await step(
      "empty: like_fact insert",
      async () => (await client.query(LOAD_LIKES, [importedAt])).rowCount ?? 0,
    );
    await step(`empty: restore ${LIKE_FACT_KEY}`, () => client.query(key.restore));
  } catch (err) {
    if (!(mapPgError(err) instanceof UniqueViolationError)) throw err;
    await client.query("ROLLBACK TO SAVEPOINT import_likes");
    await step("empty: drop the later lines of pairs given twice", () => client.query(DROP_LATER_LINES));
    likes = await step(
      "empty: like_fact insert, a pair's first line only",
      async () => (await client.query(LOAD_LIKES, [importedAt])).rowCount ?? 0,
    );
    await step(`empty: restore ${LIKE_FACT_KEY}`, () => client.query(key.restore));
  }
  await client.query("RELEASE SAVEPOINT import_likes");
  await step("empty: history baselines", () => client.query(LOAD_BASELINES));
  await step("empty: like_count GROUP BY (item, partition)", () => client.query(LOAD_COUNTS, [partitions]));
  await client.query(HOOK, [likes]);
  for (const a of aside.filter((x) => x !== key))
    await step(
      `empty: restore ${a.restore.replace(/^(CREATE (UNIQUE )?INDEX \S+|ALTER TABLE \S+ ADD CONSTRAINT \S+ (PRIMARY KEY|FOREIGN KEY|UNIQUE)).*$/s, "$1")}`,
      () => client.query(a.restore),
    );
  await client.query(GUARD_ON);
  return { items, likes };
}
