import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { ForeignKeyViolationError } from "../db/errors.ts";
import { withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { InvalidInputError } from "../errors.ts";
import { stablePartition } from "../partition.ts";
import { AccountNotFoundError } from "./errors.ts";
import { missingAccounts, relationships } from "./relation-reads.ts";
import type { AccountSettings, RelationResult, RelationState, Relationship } from "./types.ts";

interface PairRow {
  state: RelationState;
  version: number;
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
 */
export class RelationService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    private readonly hooks: Hooks,
    private readonly checkBlockBeforeLock: boolean,
  ) {}

  static async open(pool: Pool, options: { hooks?: Hooks; checkBlockBeforeLock?: boolean } = {}): Promise<RelationService> {
    return new RelationService(pool, await readPartitions(pool), options.hooks ?? new Hooks(), options.checkBlockBeforeLock ?? false);
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
      const before = await client.query<{ private: boolean }>("SELECT private FROM account WHERE account_id = $1 FOR UPDATE", [accountId]);
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
          "SELECT follower, version FROM relation WHERE followee = $1 AND state = 'PENDING' ORDER BY follower FOR UPDATE",
          [accountId],
        );
        for (const row of pending.rows) {
          await this.transition(client, row.follower, accountId, { state: "PENDING", version: row.version }, "ACTIVE");
          approved++;
        }
      }
      return { accountId, private: isPrivate, created, approvedRequests: approved };
    });
  }

  follow(follower: string, followee: string): Promise<RelationResult> {
    return this.run("follower", follower, "followee", followee, async (client) => {
      if (follower === followee) return rejected("REMOVED", 0, "cannot follow yourself", "SELF_FOLLOW");
      if (this.checkBlockBeforeLock) {
        // Negative control 30-I: the check happens before the lock, so a block that commits
        // in between is not seen.
        const blocked = await blockedEitherWay(client, follower, followee);
        await this.hooks.at("follow.afterBlockCheck", { follower, followee });
        const cur = await lockPair(client, follower, followee);
        if (blocked) return rejected(cur.state, cur.version, "blocked", "BLOCKED");
        return this.followLocked(client, follower, followee, cur);
      }
      const cur = await lockPair(client, follower, followee);
      await this.hooks.at("follow.afterLock", { follower, followee, pid: backendPid(client) });
      if (await blockedEitherWay(client, follower, followee)) return rejected(cur.state, cur.version, "blocked", "BLOCKED");
      return this.followLocked(client, follower, followee, cur);
    });
  }

  private async followLocked(client: PoolClient, follower: string, followee: string, cur: PairRow): Promise<RelationResult> {
    if (cur.state === "ACTIVE") return noop(cur, "already ACTIVE");
    let { rows } = await client.query<{ private: boolean }>("SELECT private FROM account WHERE account_id = $1", [followee]);
    if (rows[0]!.private) {
      // A request is only PENDING while the account is private: the share lock waits for an
      // unlock in progress (which approves the requests it can see) and re-reads the flag after it.
      ({ rows } = await client.query<{ private: boolean }>("SELECT private FROM account WHERE account_id = $1 FOR SHARE", [followee]));
    }
    const target: RelationState = rows[0]!.private ? "PENDING" : "ACTIVE";
    // A request left PENDING towards an account that is public now is approved by asking again.
    if (cur.state === target) return noop(cur, `already ${cur.state}`);
    return this.transition(client, follower, followee, cur, target);
  }

  unfollow(follower: string, followee: string): Promise<RelationResult> {
    return this.run("follower", follower, "followee", followee, async (client) => {
      if (follower === followee) return rejected("REMOVED", 0, "cannot unfollow yourself", "SELF_FOLLOW");
      const cur = await lockPair(client, follower, followee);
      if (cur.state === "REMOVED") return noop(cur, "already REMOVED");
      return this.transition(client, follower, followee, cur, "REMOVED");
    });
  }

  /** The followee decides a pending request: approve -> ACTIVE, reject -> REMOVED. */
  async decide(followee: string, follower: string, approve: boolean): Promise<RelationResult> {
    if (typeof approve !== "boolean") throw new InvalidInputError("approve", "must be a boolean");
    return this.run("followee", followee, "follower", follower, async (client) => {
      if (follower === followee) return rejected("REMOVED", 0, "no request from yourself", "NOT_PENDING");
      const cur = await lockPair(client, follower, followee);
      if (cur.state !== "PENDING") return rejected(cur.state, cur.version, `not PENDING (${cur.state})`, "NOT_PENDING");
      return this.transition(client, follower, followee, cur, approve ? "ACTIVE" : "REMOVED");
    });
  }

  /** blocker blocks blocked: writes the block row and removes both directions of the relation. */
  block(blocker: string, blocked: string): Promise<RelationResult> {
    return this.run("blocker", blocker, "blocked", blocked, async (client) => {
      if (blocker === blocked) return rejected("REMOVED", 0, "cannot block yourself", "SELF_BLOCK");
      // Both rows in lexicographic order of (follower, followee): the same order for every transaction.
      const pairs: [string, string][] = blocker < blocked
        ? [[blocker, blocked], [blocked, blocker]]
        : [[blocked, blocker], [blocker, blocked]];
      const current: PairRow[] = [];
      for (const [f, e] of pairs) current.push(await lockPair(client, f, e));
      await this.hooks.at("block.afterLock", { blocker, blocked, pid: backendPid(client) });
      const inserted = await client.query(
        "INSERT INTO block (blocker, blocked) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        [blocker, blocked],
      );
      const changes = pairs
        .map(([follower, followee], i) => ({ follower, followee, cur: current[i]! }))
        .filter((c) => c.cur.state !== "REMOVED")
        .sort((a, b) => this.partitionOf(a.followee) - this.partitionOf(b.followee));
      const blockedIndex = pairs.findIndex(([f]) => f === blocked);
      let result = { ...current[blockedIndex]!, seq: 0 };
      for (const change of changes) {
        const r = await this.transition(client, change.follower, change.followee, change.cur, "REMOVED");
        if (change.follower === blocked) result = { state: r.state, version: r.version, seq: r.seq };
        result.seq = Math.max(result.seq, r.seq);
      }
      await this.hooks.at("block.beforeCommit", { blocker, blocked });
      if (inserted.rowCount === 0 && changes.length === 0) {
        return { outcome: "NOOP", state: result.state, version: result.version, seq: 0, reason: "already blocked" };
      }
      return { outcome: "CHANGED", state: result.state, version: result.version, seq: result.seq, reason: "blocked" };
    });
  }

  /** Deletes the block row only; the relation stays REMOVED (invariant 4). */
  unblock(blocker: string, blocked: string): Promise<RelationResult> {
    return this.run("blocker", blocker, "blocked", blocked, async (client) => {
      await requireAccounts(client, [blocker, blocked]);
      const deleted = await client.query("DELETE FROM block WHERE blocker = $1 AND blocked = $2", [blocker, blocked]);
      const { rows } = await client.query<PairRow>(
        "SELECT state, version FROM relation WHERE follower = $1 AND followee = $2",
        [blocked, blocker],
      );
      const pair = rows[0] ?? { state: "REMOVED" as const, version: 0 };
      if (deleted.rowCount === 0) return noop(pair, "not blocked");
      return { outcome: "CHANGED", state: pair.state, version: pair.version, seq: 0, reason: "unblocked" };
    });
  }

  /** The Mastodon-shaped relationship of a towards b, from the truth (relationships() in relation-reads.ts). */
  async relationship(a: string, b: string): Promise<Relationship> {
    validateId("accountId", a);
    validateId("otherId", b);
    const missing = await missingAccounts(this.pool, [a, b]);
    if (missing.length > 0) throw new AccountNotFoundError(missing.join(", "));
    const [found] = (await relationships(this.pool, a, [b])) as [Relationship & { id: string }];
    return { following: found.following, requested: found.requested, followedBy: found.followedBy, requestedBy: found.requestedBy, blocking: found.blocking, blockedBy: found.blockedBy };
  }

  /** Validates both ids, runs the operation in a retried transaction, maps an FK violation to AccountNotFoundError. */
  private async run(
    nameA: string, a: string, nameB: string, b: string,
    work: (client: PoolClient) => Promise<RelationResult>,
  ): Promise<RelationResult> {
    validateId(nameA, a);
    validateId(nameB, b);
    try {
      return await withTransaction(this.pool, work);
    } catch (err) {
      if (err instanceof ForeignKeyViolationError && /^relation_follow(er|ee)_fkey$/.test(err.constraint ?? "")) {
        throw await accountNotFound(this.pool, [a, b]);
      }
      throw err;
    }
  }

  /** State change under the pair's lock: version + 1, then the next seq of the followee's partition, then the event. */
  private async transition(client: PoolClient, follower: string, followee: string, cur: PairRow, target: RelationState): Promise<RelationResult> {
    const version = cur.version + 1;
    await client.query(
      "UPDATE relation SET state = $3, version = $4, changed_at = now() WHERE follower = $1 AND followee = $2",
      [follower, followee, target, version],
    );
    const part = this.partitionOf(followee);
    const seqRows = await client.query<{ last: number }>("UPDATE event_seq SET last = last + 1 WHERE part = $1 RETURNING last", [part]);
    const seq = seqRows.rows[0]!.last;
    await client.query(
      "INSERT INTO relation_event (part, seq, follower, followee, state, version) VALUES ($1, $2, $3, $4, $5, $6)",
      [part, seq, follower, followee, target, version],
    );
    await this.hooks.at("relation.afterEvent", { follower, followee, seq, part, version, pid: backendPid(client) });
    return { outcome: "CHANGED", state: target, version, seq, reason: `${cur.state}->${target}` };
  }
}

/** Ensures the pair's row exists (a v0 REMOVED placeholder, no event) and locks it. */
export async function lockPair(client: PoolClient, follower: string, followee: string): Promise<PairRow> {
  await client.query(
    "INSERT INTO relation (follower, followee, state, version) VALUES ($1, $2, 'REMOVED', 0) ON CONFLICT DO NOTHING",
    [follower, followee],
  );
  // A new statement with a new snapshot: sees a row another transaction inserted meanwhile.
  const { rows } = await client.query<PairRow>(
    "SELECT state, version FROM relation WHERE follower = $1 AND followee = $2 FOR UPDATE",
    [follower, followee],
  );
  return rows[0]!;
}

export async function blockedEitherWay(client: PoolClient | Pool, a: string, b: string): Promise<boolean> {
  const { rows } = await client.query<{ blocked: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM block WHERE (blocker = $1 AND blocked = $2) OR (blocker = $2 AND blocked = $1)) AS blocked`,
    [a, b],
  );
  return rows[0]!.blocked;
}

async function requireAccounts(client: PoolClient, ids: string[]): Promise<void> {
  const missing = await missingAccounts(client, ids);
  if (missing.length > 0) throw new AccountNotFoundError(missing.join(", "));
}

/** After a failure that says an account is missing: the missing ones (all, if they exist by now). */
async function accountNotFound(db: PoolClient | Pool, ids: string[]): Promise<AccountNotFoundError> {
  const missing = await missingAccounts(db, ids);
  return new AccountNotFoundError((missing.length > 0 ? missing : ids).join(", "));
}

function noop(cur: PairRow, reason: string): RelationResult {
  return { outcome: "NOOP", state: cur.state, version: cur.version, seq: 0, reason };
}

function rejected(state: RelationState, version: number, reason: string, code: string): RelationResult {
  return { outcome: "REJECTED", state, version, seq: 0, reason, code };
}
