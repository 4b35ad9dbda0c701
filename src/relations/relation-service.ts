import type { Pool, PoolClient } from "../db/pool.ts";
import { numericDefault } from "../config.ts";
import { AccountBeingErasedError, AccountErasedError, ForeignKeyViolationError } from "../db/errors.ts";
import { GroupCommit } from "../db/group-commit.ts";
import { withStatementRetry, withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { validateId } from "../ids.ts";
import { InvalidInputError } from "../errors.ts";
import { stablePartition } from "../partition.ts";
import { AccountNotFoundError } from "./errors.ts";
import { erasedAccounts } from "./account-settings.ts";
import { missingAccounts, pairRelationship } from "./relation-reads.ts";
import type { AccountSettings, Outcome, RelationResult, RelationState, Relationship } from "./types.ts";

/** A row returned by the write functions relation_set_batch, relation_block and relation_unblock (src/db/schema.sql). */
interface WriteRow {
  /** REJECTED with code ACCOUNT_NOT_FOUND: `reason` names the missing accounts. */
  outcome: Outcome;
  state: RelationState;
  version: number;
  seq: number;
  reason: string;
  code: string | null;
}

const RESULT_COLUMNS = "outcome, state, version, seq, reason, code";
const WRITE_FUNCTIONS = {
  block: { name: "relation_block", text: `SELECT ${RESULT_COLUMNS} FROM relation_block($1, $2, $3)` },
  unblock: { name: "relation_unblock", text: `SELECT ${RESULT_COLUMNS} FROM relation_unblock($1, $2)` },
} as const;

/** The writes group commit batches: one pair each, of any partition. */
type BatchedOp = "follow" | "unfollow" | "decide";

/** One write for relation_set_batch, in the single function's argument order (decide: a = followee). */
interface RelationWrite {
  op: BatchedOp;
  a: string;
  b: string;
  approve: boolean | null;
}

/** One answer of relation_set_batch (src/db/schema.sql), ord being the write's position in the batch. */
interface BatchRow extends WriteRow {
  ord: number;
  /** With ACCOUNT_BEING_ERASED: the account whose erasure refused the write. */
  account: string | null;
}

const RELATION_SET_BATCH = {
  name: "relation_set_batch",
  text: `SELECT ord, ${RESULT_COLUMNS}, account FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer)`,
};

/** Batches in flight at once, as for likes: one committing while the next takes its row locks and queues for the event_seq rows. */
export const RELATION_BATCHES_IN_FLIGHT = 2;

/**
 * How often a batch is sent again after the erasure guard's trigger refused one of its rows (an
 * erasure began between the batch's own check and its write): the next run's check answers that
 * row on its own. A bound, not a loop, in case erasures keep starting. In relation_set_batch only
 * the INSERT guard can refuse (a new pair's placeholder row): before each UPDATE the batch asks
 * the UPDATE guard's question itself and answers a refusal as that write's own row.
 */
const ERASURE_RACE_ATTEMPTS = 3;

export interface RelationServiceOptions {
  /** Most follow/unfollow/decide writes per batch (LEDGER_WRITE_BATCH_MAX); 1: each write a batch of one. */
  batchMax?: number;
  /** Batches in flight at once; default RELATION_BATCHES_IN_FLIGHT. */
  batchesInFlight?: number;
}

/**
 * The write side of chapter 30. Every operation is one READ COMMITTED transaction with a
 * fixed lock order: relation rows (lexicographic by (follower, followee)) -> the event_seq
 * rows of the partitions written (ascending). Two exceptions touch an account row: a follow
 * of a private account share-locks it after its relation row, and an unlock (upsertAccount)
 * locks it before the pending relation rows; the rare deadlock between a re-follow of a
 * pending request and the unlock of that account is a 40P01 that withTransaction retries. The block check runs *after* the relation row
 * lock: a block transaction must take the same row lock first, so what the check reads cannot
 * change before this transaction commits (the chapter's argument, test 30-H/30-I).
 *
 * Each operation runs as one server-side function call (relation_set_batch, relation_block,
 * relation_unblock, src/db/schema.sql), one round trip. The deterministic race tests pause inside
 * those functions, at their hook points (ledger_hook), so they race the statements production
 * runs (docs/testing.md).
 *
 * One write path (docs/write-path.md, "One write path"): every follow, unfollow and decision of
 * this process goes through one batcher, whatever its partition. Writes that arrive while
 * RELATION_BATCHES_IN_FLIGHT batches are running go together as one relation_set_batch call,
 * which decides each on its own in arrival order, takes the event_seq rows of its partitions in
 * ascending order, passes the same hook points, and answers each with its own row. A write that
 * finds the service idle goes at once, as a batch of one. Block and unblock are not batched.
 */
export class RelationService {
  private readonly batcher: GroupCommit<RelationWrite, RelationResult | Error>;

  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    options: RelationServiceOptions,
  ) {
    const maxBatch = options.batchMax ?? numericDefault("LEDGER_WRITE_BATCH_MAX");
    this.batcher = new GroupCommit((writes) => this.runBatch(writes), {
      maxBatch,
      // Unbatched (LEDGER_WRITE_BATCH_MAX = 1): every caller's write is sent at once, as before group commit.
      maxInFlight: options.batchesInFlight ?? (maxBatch === 1 ? Number.MAX_SAFE_INTEGER : RELATION_BATCHES_IN_FLIGHT),
    });
  }

  static async open(pool: Pool, options: RelationServiceOptions = {}): Promise<RelationService> {
    return new RelationService(pool, await readPartitions(pool), options);
  }

  /** Group commit's figures so far. */
  batchStats(): { batches: number; writes: number; largest: number } {
    return { ...this.batcher.stats };
  }

  partitionOf(followee: string): number {
    return stablePartition(followee, this.partitions);
  }

  /**
   * Creates an account, or changes only what `options` names: no option changes nothing (an
   * empty update never turns a private account public). Making a private account public
   * approves its pending follow requests in the same transaction, as Mastodon does.
   * Lock order: the account row, then the relation rows (by follower), then event_seq.
   */
  async upsertAccount(accountId: string, options: { private?: boolean } = {}): Promise<AccountSettings> {
    validateId("accountId", accountId);
    if (options.private !== undefined && typeof options.private !== "boolean") {
      throw new InvalidInputError("private", "must be a boolean");
    }
    return withTransaction(this.pool, async (client) => {
      // An erased account is a tombstone (docs/erasure.md): never created anew (the account
      // guard refuses any change of its row too, SLE02).
      const before = await client.query<{ private: boolean; erased_state: string | null }>(
        "SELECT private, erased_state FROM account WHERE account_id = $1 FOR UPDATE",
        [accountId],
      );
      if (before.rows[0]?.erased_state === "ERASED") throw AccountErasedError.of(accountId);
      const { rows } = await client.query<{ private: boolean }>(
        `INSERT INTO account (account_id, private) VALUES ($1, coalesce($2, false))
         ON CONFLICT (account_id) DO UPDATE SET private = coalesce($2, account.private)
         RETURNING private`,
        [accountId, options.private ?? null],
      );
      const created = before.rows.length === 0;
      const isPrivate = rows[0]!.private;
      let approved = 0;
      if (!created && before.rows[0]!.private && !isPrivate) {
        const pending = await client.query<{ follower: string; version: number }>(
          // A request of an account being erased is not approved: its erasure removes it (docs/erasure.md).
          `SELECT r.follower, r.version FROM relation r WHERE r.followee = $1 AND r.state = 'PENDING'
              AND NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = r.follower AND a.erased_state IS NOT NULL)
            ORDER BY r.follower FOR UPDATE OF r`,
          [accountId],
        );
        for (const row of pending.rows) {
          await this.approve(client, row.follower, accountId, row.version);
          approved++;
        }
      }
      return { accountId, private: isPrivate, created, approvedRequests: approved };
    });
  }

  follow(follower: string, followee: string): Promise<RelationResult> {
    return this.batchedWrite(
      { op: "follow", a: follower, b: followee, approve: null },
      "follower",
      "followee",
      rejected("cannot follow yourself", "SELF_FOLLOW"),
    );
  }

  unfollow(follower: string, followee: string): Promise<RelationResult> {
    return this.batchedWrite(
      { op: "unfollow", a: follower, b: followee, approve: null },
      "follower",
      "followee",
      rejected("cannot unfollow yourself", "SELF_FOLLOW"),
    );
  }

  /** The followee decides a pending request: approve -> ACTIVE, reject -> REMOVED. */
  async decide(followee: string, follower: string, approve: boolean): Promise<RelationResult> {
    if (typeof approve !== "boolean") throw new InvalidInputError("approve", "must be a boolean");
    return this.batchedWrite(
      { op: "decide", a: followee, b: follower, approve },
      "followee",
      "follower",
      rejected("no request from yourself", "NOT_PENDING"),
    );
  }

  /** blocker blocks blocked: writes the block row and removes both directions of the relation. */
  block(blocker: string, blocked: string): Promise<RelationResult> {
    return this.callWrite(
      "blocker",
      blocker,
      "blocked",
      blocked,
      rejected("cannot block yourself", "SELF_BLOCK"),
      WRITE_FUNCTIONS.block,
      [blocker, blocked, this.partitions],
    );
  }

  /** Deletes the block row only; the relation stays REMOVED (invariant 4). */
  unblock(blocker: string, blocked: string): Promise<RelationResult> {
    return this.callWrite("blocker", blocker, "blocked", blocked, undefined, WRITE_FUNCTIONS.unblock, [
      blocker,
      blocked,
    ]);
  }

  /** The Mastodon-shaped relationship of a towards b, from the truth, in one statement (pairRelationship in relation-reads.ts). */
  async relationship(a: string, b: string): Promise<Relationship> {
    const { aExists, bExists, relationship } = await pairRelationship(this.pool, a, b);
    const missing = [...new Set([...(aExists ? [] : [a]), ...(bExists ? [] : [b])])];
    if (missing.length > 0) throw new AccountNotFoundError(missing.join(", "));
    return relationship;
  }

  /**
   * Follow, unfollow and decide: validated and self-targeted calls answered here, then through
   * the batcher (group commit).
   */
  private async batchedWrite(
    write: RelationWrite,
    nameA: string,
    nameB: string,
    self: RelationResult,
  ): Promise<RelationResult> {
    validateId(nameA, write.a);
    validateId(nameB, write.b);
    if (write.a === write.b) return self;
    const answer = await this.batcher.submit(write);
    if (answer instanceof Error) throw answer;
    return answer;
  }

  /**
   * One batch, one autocommit statement, re-run whole on a serialization failure or deadlock (it
   * wrote nothing). Each write is answered with its own row: a result, or the typed error of its
   * refusal (AccountNotFoundError, AccountErasedError, AccountBeingErasedError).
   */
  private async runBatch(writes: readonly RelationWrite[]): Promise<(RelationResult | Error)[]> {
    const values = [
      writes.map((w) => w.op),
      writes.map((w) => w.a),
      writes.map((w) => w.b),
      writes.map((w) => w.approve),
      this.partitions,
    ];
    const rows = await this.sendBatch(values);
    const byOrd: BatchRow[] = [];
    for (const row of rows) byOrd[row.ord - 1] = row;
    // An error path: which acting accounts of the writes answered missing are erased.
    const missingActors = writes.filter((w, i) => byOrd[i]?.code === "ACCOUNT_NOT_FOUND").map((w) => w.a);
    const erased = new Set(missingActors.length > 0 ? await erasedAccounts(this.pool, missingActors) : []);
    return writes.map((w, i) => {
      const row = byOrd[i];
      if (!row) throw new Error(`relation_set_batch returned no answer for write ${i + 1} of ${writes.length}`);
      if (row.code === "ACCOUNT_NOT_FOUND" && erased.has(w.a)) return AccountErasedError.of(w.a);
      return batchAnswer(row);
    });
  }

  private async sendBatch(values: unknown[]): Promise<BatchRow[]> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await withStatementRetry(
          async () => (await this.pool.query<BatchRow>({ ...RELATION_SET_BATCH, values })).rows,
        );
      } catch (err) {
        // The guard's INSERT trigger refused a placeholder whose erasure began after the batch's own check; nothing was written.
        // (Or an erasure that finished since: SLE02; the next run's check answers that row on its own too.)
        if (
          !(err instanceof AccountBeingErasedError || err instanceof AccountErasedError) ||
          attempt >= ERASURE_RACE_ATTEMPTS
        )
          throw err;
      }
    }
  }

  /**
   * The one-round-trip path: validates both ids, answers a self-targeted call (`self`) without
   * asking the database, runs the write function as one retried autocommit statement, and maps
   * a missing account (FK violation, or the function's ACCOUNT_NOT_FOUND) to AccountNotFoundError.
   */
  private async callWrite(
    nameA: string,
    a: string,
    nameB: string,
    b: string,
    self: RelationResult | undefined,
    statement: { name: string; text: string },
    values: unknown[],
  ): Promise<RelationResult> {
    validateId(nameA, a);
    validateId(nameB, b);
    if (self && a === b) return self;
    return this.runWrite(a, b, statement, values);
  }

  private async runWrite(
    a: string,
    b: string,
    statement: { name: string; text: string },
    values: unknown[],
  ): Promise<RelationResult> {
    let row: WriteRow;
    try {
      row = await withStatementRetry(async () => (await this.pool.query<WriteRow>({ ...statement, values })).rows[0]!);
    } catch (err) {
      // An error path: one more read names exactly the missing accounts, never the caller who exists.
      if (err instanceof ForeignKeyViolationError && /^relation_follow(er|ee)_fkey$/.test(err.constraint ?? "")) {
        throw await accountNotFound(this.pool, [a, b]);
      }
      // The guard's SLE02 on the pair's first row: the actor's own tombstone, or an unknown other side.
      if (err instanceof AccountErasedError) throw await notFoundOrErased(this.pool, a, b);
      throw err;
    }
    if (row.code === "ACCOUNT_NOT_FOUND") throw await notFoundOrErased(this.pool, a, row.reason);
    const result: RelationResult = {
      outcome: row.outcome,
      state: row.state,
      version: row.version,
      seq: row.seq,
      reason: row.reason,
    };
    return row.code === null ? result : { ...result, code: row.code };
  }

  /** An approval of the unlock: the state change and its event, by the write functions' own step (relation_write_event, which passes relation.afterEvent). */
  private async approve(client: PoolClient, follower: string, followee: string, version: number): Promise<void> {
    await client.query("SELECT relation_write_event($1, $2, 'ACTIVE', $3, $4)", [
      follower,
      followee,
      version + 1,
      this.partitions,
    ]);
  }
}

export async function blockedEitherWay(client: PoolClient | Pool, a: string, b: string): Promise<boolean> {
  const { rows } = await client.query<{ blocked: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM block WHERE (blocker = $1 AND blocked = $2) OR (blocker = $2 AND blocked = $1)) AS blocked`,
    [a, b],
  );
  return rows[0]!.blocked;
}

/**
 * `account` blocks `viewer` and `viewer` does not block `account`: the case in which the relation
 * routes answer as if `account` did not exist (docs/api.md, "What a blocked user learns").
 */
export async function blockedByOnly(db: PoolClient | Pool, viewer: string, account: string): Promise<boolean> {
  const { rows } = await db.query<{ hidden: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM block WHERE blocker = $2 AND blocked = $1)
        AND NOT EXISTS (SELECT 1 FROM block WHERE blocker = $1 AND blocked = $2) AS hidden`,
    [viewer, account],
  );
  return rows[0]!.hidden;
}

/**
 * A write function answered ACCOUNT_NOT_FOUND: when its acting account `actor` (the first argument
 * of every write function) is erased, the write is refused as the tombstone's (AccountErasedError);
 * an erased other side stays an unknown account, as reads answer it.
 */
async function notFoundOrErased(db: PoolClient | Pool, actor: string, missing: string): Promise<Error> {
  const erased = await erasedAccounts(db, [actor]);
  return erased.length > 0 ? AccountErasedError.of(actor) : new AccountNotFoundError(missing);
}

/** After a failure that says an account is missing: the missing ones (all, if they exist by now). */
async function accountNotFound(db: PoolClient | Pool, ids: string[]): Promise<AccountNotFoundError> {
  const missing = await missingAccounts(db, ids);
  return new AccountNotFoundError((missing.length > 0 ? missing : ids).join(", "));
}

/** A row of relation_set_batch as the single call's answer, or the error the single call would have thrown. */
function batchAnswer(row: BatchRow): RelationResult | Error {
  if (row.code === "ACCOUNT_NOT_FOUND") return new AccountNotFoundError(row.reason);
  if (row.code === "ACCOUNT_BEING_ERASED") {
    // The same typed error as the guard's SQLSTATE SLE01 on the single call (erasure_refuse).
    return new AccountBeingErasedError(
      "ACCOUNT_BEING_ERASED",
      `account ${row.account ?? "?"} is being erased: writes by or towards it are refused until the erasure completes`,
      undefined,
      "SLE01",
    );
  }
  const result: RelationResult = {
    outcome: row.outcome,
    state: row.state,
    version: row.version,
    seq: row.seq,
    reason: row.reason,
  };
  return row.code === null ? result : { ...result, code: row.code };
}

/** A self-targeted call's answer, given without asking the database. */
function rejected(reason: string, code: string): RelationResult {
  return { outcome: "REJECTED", state: "REMOVED", version: 0, seq: 0, reason, code };
}
