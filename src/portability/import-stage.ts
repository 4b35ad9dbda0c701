import { createHash } from "node:crypto";
import { createInterface } from "node:readline";
import { Transform } from "node:stream";
import type { Pool, PoolClient } from "../db/pool.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { withTransaction } from "../db/transaction.ts";
import { LedgerError, InvalidInputError } from "../errors.ts";
import { copyIn } from "./copy-in.ts";
import { parseFactLine, stageRow } from "./fact-line.ts";
import { LedgerNotEmptyError, likeSideState, loadEmptyLikeSide, lockLikeSide } from "./import-empty.ts";

/** Bad lines listed in the refusal; the rest are counted. */
export const LISTED_BAD_LINES = 20;

export interface BadLine {
  line: number;
  message: string;
}

/** A file with at least one bad line: nothing of it was imported (nothing was written at all). */
export class BadLinesError extends LedgerError {
  constructor(
    readonly badLines: readonly BadLine[],
    readonly total: number,
  ) {
    const listed = badLines.map((b) => `  line ${b.line}: ${b.message}`);
    if (total > badLines.length) listed.push(`  and ${total - badLines.length} more`);
    super("IMPORT_BAD_LINES", `${total} bad line(s), nothing was imported:\n${listed.join("\n")}`);
  }
}

export interface StagedRun {
  runId: number;
  lines: number;
  importedAt: Date;
  /** A run of the same file existed already: `done` means imported completely before, else it resumes. */
  existing: "none" | "resumed" | "done";
  /** empty-ledger: the items and likes were loaded in the staging transaction (import-empty.ts); resumable: every kind is left to the apply's batches. */
  path: ImportPath;
}

export type ImportPath = "empty-ledger" | "resumable";

/**
 * The cross-line checks, over the read lines of run $1 in import_lines (each row: line, message): a like of
 * an item neither declared in the file nor in the database, or of a post or comment its user may
 * not see (the rule of like_set_if_visible, asked of the database as it stands); a follow or block
 * towards an account neither declared nor existing (the API creates only the acting account); an
 * account declared twice with different settings; a follow given twice with different states. And
 * the tombstones (docs/erasure.md): an account line of an account erased (or being erased) here; an
 * erased account's line (`erased: true`) of an account live here; a like, follow or block by an
 * erased account, or a follow of one, whether erased here or in the file (a block of one is its
 * blocker's data and is kept). And an account line that would make an account private here public
 * (that approves its pending requests: the account's own decision, PUT /v1/accounts/{id}).
 */
const CROSS_LINE_SQL = `
  WITH firsts AS (
    -- Each account's and each follow pair's first line, to compare the later ones with.
    SELECT kind, line, a, b, state, private, hide,
           first_value(line) OVER w AS first_line, first_value(state) OVER w AS first_state,
           first_value(private) OVER w AS first_private, first_value(hide) OVER w AS first_hide
      FROM import_lines WHERE run_id = $1 AND kind IN ('account', 'follow')
    WINDOW w AS (PARTITION BY kind, a, b ORDER BY line)),
  bad AS (
    SELECT l.line, 'item: ' || l.b || ' is neither declared in the file nor in the database' AS message
      FROM import_lines l
     WHERE l.run_id = $1 AND l.kind = 'like'
       AND NOT EXISTS (SELECT 1 FROM import_lines i WHERE i.run_id = $1 AND i.kind = 'item' AND i.a = l.b)
       AND NOT EXISTS (SELECT 1 FROM item i WHERE i.item_id = l.b)
    UNION ALL
    SELECT l.line, 'item: ' || l.b || ' is a ' || i.kind || ' that ' || l.a || ' may not see (or a deleted one)'
      FROM import_lines l JOIN item i ON i.item_id = l.b AND i.kind <> 'plain'
     WHERE l.run_id = $1 AND l.kind = 'like'
       -- Referring to i keeps the rule's function after the join: asked for posts and comments only.
       AND CASE WHEN i.kind <> 'plain' THEN item_state(l.a, l.b, 'TRUTH') END <> 'VISIBLE'
    UNION ALL
    SELECT l.line, CASE l.kind WHEN 'follow' THEN 'followee: ' ELSE 'blocked: ' END || l.b || ' is an account neither declared in the file nor in the database'
      FROM import_lines l
     WHERE l.run_id = $1 AND l.kind IN ('follow', 'block')
       AND NOT EXISTS (SELECT 1 FROM import_lines x WHERE x.run_id = $1 AND x.kind = 'account' AND x.a = l.b)
       AND NOT EXISTS (SELECT 1 FROM account x WHERE x.account_id = l.b)
    UNION ALL
    SELECT line, 'id: account ' || a || ' is declared with other settings on line ' || first_line
      FROM firsts WHERE kind = 'account' AND (private IS DISTINCT FROM first_private OR hide IS DISTINCT FROM first_hide OR state IS DISTINCT FROM first_state)
    UNION ALL
    SELECT l.line, 'id: account ' || l.a || CASE x.erased_state WHEN 'ERASED' THEN ' was erased here: an erased id can never be an account again'
                                                ELSE ' is being erased here' END
      FROM import_lines l JOIN account x ON x.account_id = l.a AND x.erased_state IS NOT NULL
     WHERE l.run_id = $1 AND l.kind = 'account' AND (l.state IS DISTINCT FROM 'ERASED' OR x.erased_state = 'ERASING')
    UNION ALL
    SELECT l.line, 'erased: account ' || l.a || ' is live here; an import erases no account (social-ledger erase does)'
      FROM import_lines l JOIN account x ON x.account_id = l.a AND x.erased_state IS NULL
     WHERE l.run_id = $1 AND l.kind = 'account' AND l.state = 'ERASED'
    UNION ALL
    SELECT l.line, 'private: account ' || l.a || ' is private here; an import does not make it public (that would approve its pending follow requests): PUT /v1/accounts/' || l.a || ' does'
      FROM import_lines l JOIN account x ON x.account_id = l.a AND x.erased_state IS NULL AND x.private
     WHERE l.run_id = $1 AND l.kind = 'account' AND l.private = false
    UNION ALL
    SELECT l.line, CASE WHEN l.kind = 'follow' AND NOT ea.hit THEN 'followee: ' || l.b
                        ELSE CASE l.kind WHEN 'like' THEN 'user: ' WHEN 'follow' THEN 'follower: ' ELSE 'blocker: ' END || l.a END
                   || ' is an erased account: it can never act again, and no new fact may name it'
      FROM import_lines l
     CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM account x WHERE x.account_id = l.a AND x.erased_state IS NOT NULL)
                             OR EXISTS (SELECT 1 FROM import_lines e WHERE e.run_id = $1 AND e.kind = 'account' AND e.state = 'ERASED' AND e.a = l.a) AS hit) ea
     CROSS JOIN LATERAL (SELECT l.kind = 'follow' AND (
                                  EXISTS (SELECT 1 FROM account x WHERE x.account_id = l.b AND x.erased_state IS NOT NULL)
                               OR EXISTS (SELECT 1 FROM import_lines e WHERE e.run_id = $1 AND e.kind = 'account' AND e.state = 'ERASED' AND e.a = l.b)) AS hit) eb
     WHERE l.run_id = $1 AND l.kind IN ('like', 'follow', 'block') AND (ea.hit OR eb.hit)
    UNION ALL
    SELECT l.line, 'blocked: ' || l.b || ' is being erased here'
      FROM import_lines l JOIN account x ON x.account_id = l.b AND x.erased_state = 'ERASING'
     WHERE l.run_id = $1 AND l.kind = 'block'
    UNION ALL
    SELECT line, 'state: the follow ' || a || ' -> ' || b || ' is given as ' || first_state || ' on line ' || first_line
      FROM firsts WHERE kind = 'follow' AND state <> first_state)
  SELECT line, message, count(*) OVER ()::int AS total FROM bad ORDER BY line LIMIT ${LISTED_BAD_LINES}`;

/**
 * The checked lines into import_stage in key order, numbered by it per kind (`ord`): likes by
 * (item, user), so a batch's likes share few items and its like_count upsert writes one row per
 * (item, partition) instead of nearly one per like (each new row also runs two foreign-key
 * checks); the other kinds by (a, b). Byte order ("C"): only the grouping matters, and it sorts
 * fastest (a file's million lines sort in memory: work_mem is raised for this transaction). Within a pair the
 * first line comes first, so "the first line of a pair is the fact" holds across batch
 * boundaries. import_stage's primary key is filled from left to right. $1: the likes and items
 were loaded already (the empty-ledger path): only the items are staged besides the other kinds,
 for the caches phase's targets and an items phase that then writes nothing.
 */
const STAGE_SORTED = `
  INSERT INTO import_stage (run_id, kind, ord, line, a, b, state, private, hide, at)
  SELECT run_id, kind, row_number() OVER (PARTITION BY kind ORDER BY CASE WHEN kind = 'like' THEN b END COLLATE "C", a COLLATE "C", b COLLATE "C", line),
         line, a, b, state, private, hide, at
    FROM import_lines WHERE NOT (kind = 'like' AND $1::boolean) ORDER BY kind, CASE WHEN kind = 'like' THEN b END COLLATE "C", a COLLATE "C", b COLLATE "C", line`;

export interface StageOptions {
  /** Called every `progressEvery` lines read, and once at the end. */
  onLines?: (lines: number) => void;
  /** The time the facts without `at` get, and after which no `at` may lie (default: now). */
  now?: Date;
  /**
   * auto (default): the empty-ledger path when the like side is empty (no item, no like, no
   * running erasure; docs/import.md, "The empty-ledger path"), else the resumable one; require:
   * the empty-ledger path or LedgerNotEmptyError (nothing written); never: the resumable path.
   */
  emptyLedger?: "auto" | "require" | "never";
  /** Called with each step's name, its milliseconds and the lines it went through (the report's breakdown). */
  onTiming?: (step: string, ms: number, lines?: number) => void;
}

/**
 * The first pass: reads `input` line by line, checks each line on its own, COPYs the good ones
 * into import_stage, runs the cross-line checks on them, and only then records the run, all in
 * one transaction. Any bad line (on its own or against the others) rolls it back whole and
 * throws BadLinesError listing the first 20 by number: nothing was written. A file staged before
 * (same SHA-256) is not staged again: its run is returned to be resumed, or as done.
 */
export async function stageImport(
  pool: Pool,
  input: NodeJS.ReadableStream,
  options: StageOptions = {},
): Promise<StagedRun> {
  const now = options.now ?? new Date();
  const digest = createHash("sha256");
  // The digest sees the bytes the lines are read from; the pipe holds them back until the COPY reads.
  const hashed = input.pipe(
    new Transform({
      transform(chunk: Buffer, _encoding, done) {
        digest.update(chunk);
        done(null, chunk);
      },
    }),
  );
  const bad: BadLine[] = [];
  let badTotal = 0;
  let lines = 0;
  const mode = options.emptyLedger ?? "auto";
  const timed = options.onTiming ?? (() => {});
  const partitions = await readPartitions(pool);
  let mark = performance.now();
  const lap = (step: string, lines?: number) => {
    const t = performance.now();
    timed(step, t - mark, lines);
    mark = t;
  };
  return withTransaction(
    pool,
    async (client) => {
      if (mode === "require") {
        // Refused before the file is read; asked again under the lock below.
        const side = await likeSideState(client);
        if (!side.empty) throw new LedgerNotEmptyError(side.detail);
      }
      const runId = Number(
        (await client.query<{ id: string }>("SELECT nextval('import_run_id')::text AS id")).rows[0]!.id,
      );
      const rows = async function* (): AsyncGenerator<string> {
        let chunk = "";
        for await (const text of createInterface({ input: hashed, crlfDelay: Infinity })) {
          lines++;
          if (lines % 10_000 === 0) options.onLines?.(lines);
          if (text.trim() === "") continue;
          try {
            chunk += stageRow(runId, lines, parseFactLine(text, now.getTime()));
          } catch (err) {
            if (!(err instanceof InvalidInputError)) throw err;
            badTotal++;
            if (bad.length < LISTED_BAD_LINES) bad.push({ line: lines, message: err.message });
            continue;
          }
          if (chunk.length >= 256 * 1024) {
            yield chunk;
            chunk = "";
          }
        }
        if (chunk.length > 0) yield chunk;
      };
      // A million lines are some 100 MB of temporary table: in local buffers of that size they are
      // read back from memory (the default, 8 MB, writes them out and reads them again for every
      // pass). A session that used a temporary table already cannot change the size; it keeps its own.
      await client.query("SAVEPOINT temp_buffers");
      try {
        await client.query("SET temp_buffers = '256MB'");
        await client.query("RELEASE SAVEPOINT temp_buffers");
      } catch {
        await client.query("ROLLBACK TO SAVEPOINT temp_buffers");
      }
      // The lines go first to a temporary table (no WAL, no index), where the cross-line checks
      // read them; only a good file is then written to import_stage, once, sorted by its key.
      await client.query(`CREATE TEMP TABLE import_lines ON COMMIT DROP AS
      SELECT run_id, kind, line, a, b, state, private, hide, at FROM import_stage WITH NO DATA`);
      mark = performance.now();
      await copyIn(client, "COPY import_lines (run_id, kind, line, a, b, state, private, hide, at) FROM STDIN", rows());
      options.onLines?.(lines);
      lap("pass 1: read, parse and check lines, COPY into import_lines", lines);
      // The read rows are the planner's to know about (a hash join, not a nested loop per line).
      await client.query("ANALYZE import_lines");
      const cross = await crossLineErrors(client, runId);
      lap("pass 1: ANALYZE and cross-line checks", lines);
      if (badTotal + cross.total > 0) {
        const listed = [...bad, ...cross.listed].sort((x, y) => x.line - y.line).slice(0, LISTED_BAD_LINES);
        // Thrown inside the transaction: it rolls back, so not even the staged lines stay.
        throw new BadLinesError(listed, badTotal + cross.total);
      }
      const hex = digest.digest("hex");
      const { rows: found } = await client.query<{ run_id: string; lines: number; imported_at: Date; phase: string }>(
        "SELECT run_id::text, lines, imported_at, phase FROM import_run WHERE digest = $1 FOR UPDATE",
        [hex],
      );
      const f = found[0];
      if (f) {
        // The same file again: its run holds its own staged lines (or is done); this copy goes with the transaction.
        return {
          runId: Number(f.run_id),
          lines: f.lines,
          importedAt: f.imported_at,
          existing: f.phase === "done" ? "done" : "resumed",
          path: "resumable",
        } satisfies StagedRun;
      }
      let path: ImportPath = "resumable";
      if (mode !== "never" && (mode === "require" || (await likeSideState(client)).empty)) {
        const side = await lockLikeSide(client);
        if (side.empty) path = "empty-ledger";
        // A live write came between the two questions: auto goes the resumable way (the locks end with this transaction).
        else if (mode === "require") throw new LedgerNotEmptyError(side.detail);
        lap("empty: lock the like side");
      }
      const loaded = path === "empty-ledger" ? await loadEmptyLikeSide(client, now, partitions, timed) : undefined;
      mark = performance.now();
      await client.query("SET LOCAL work_mem = '256MB'");
      await client.query(STAGE_SORTED, [loaded !== undefined]);
      // ANALYZE in this transaction samples the staged rows, uncommitted as they are, for the apply's plans.
      await client.query("ANALYZE import_stage");
      await client.query(
        "INSERT INTO import_run (run_id, digest, lines, imported_at, phase, applied) VALUES ($1, $2, $3, $4, 'accounts', $5)",
        [runId, hex, lines, now, loaded ? { items: loaded.items, likes: loaded.likes } : {}],
      );
      lap("staging: sorted insert into import_stage", lines);
      return { runId, lines, importedAt: now, existing: "none", path } satisfies StagedRun;
    },
    { maxAttempts: 1 },
  );
}

async function crossLineErrors(client: PoolClient, runId: number): Promise<{ listed: BadLine[]; total: number }> {
  const { rows } = await client.query<{ line: number; message: string; total: number }>(CROSS_LINE_SQL, [runId]);
  return { listed: rows.map((r) => ({ line: Number(r.line), message: r.message })), total: rows[0]?.total ?? 0 };
}
