import { Hooks } from "../../src/hooks.ts";
import { PostService, type TokenRead } from "../../src/content/posts.ts";
import { RelationProjector, type ProjectStep } from "../../src/relations/projector.ts";
import { RelationService } from "../../src/relations/relation-service.ts";
import type { RelationEvent } from "../../src/relations/types.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

export interface RelationsFixture {
  db: TestDatabase;
  hooks: Hooks;
  rel: RelationService;
  projector: RelationProjector;
  posts: PostService;
  projectorWith(step: ProjectStep): RelationProjector;
  postsWith(options: { tokenRead: TokenRead }): Promise<PostService>;
  close(): Promise<void>;
}

export function acct(n: number): string {
  return `user-${String(n).padStart(4, "0")}`;
}

/** A fresh database with P partitions and accounts user-0001..user-NNNN (those in `privateAccounts` private); `sqlHooks: false` as in production. */
export async function relationsFixture(
  partitions = 1,
  accounts = 400,
  privateAccounts: number[] = [],
  options: { sqlHooks?: boolean } = {},
): Promise<RelationsFixture> {
  const db = await createTestDatabase({ partitions, ...options });
  const hooks = new Hooks();
  await db.pool.query(
    `INSERT INTO account (account_id, private)
     SELECT 'user-' || lpad(i::text, 4, '0'), i = ANY ($2::int[]) FROM generate_series(1, $1::int) AS i`,
    [accounts, privateAccounts],
  );
  const rel = await RelationService.open(db.pool);
  return {
    db,
    hooks,
    rel,
    projector: new RelationProjector(db.pool, { hooks }),
    posts: await PostService.open(db.pool, { hooks }),
    projectorWith: (step) => new RelationProjector(db.pool, { hooks, step }),
    postsWith: (options) => PostService.open(db.pool, { hooks, ...options }),
    close: () => db.close(),
  };
}

export async function setPrivate(f: RelationsFixture, account: string, isPrivate: boolean): Promise<void> {
  await f.rel.upsertAccount(account, { private: isPrivate });
}

export async function allRelationEvents(f: RelationsFixture): Promise<RelationEvent[]> {
  const events: RelationEvent[] = [];
  for (let part = 0; part < f.db.partitions; part++)
    events.push(...(await f.projector.fetchRange(part, 1, Number.MAX_SAFE_INTEGER)));
  return events;
}

/** Delivers events in order, `batchSize` at a time, each batch split by partition. */
export async function deliverRelations(
  projector: RelationProjector,
  events: readonly RelationEvent[],
  batchSize: number,
) {
  const total = { applied: 0, stale: 0, dup: 0 };
  for (let i = 0; i < events.length; i += batchSize) {
    const slice = events.slice(i, i + batchSize);
    for (const part of new Set(slice.map((e) => e.part))) {
      const r = await projector.applyBatch(slice.filter((e) => e.part === part));
      total.applied += r.applied;
      total.stale += r.stale;
      total.dup += r.dup;
    }
  }
  return total;
}

export async function scalar(f: RelationsFixture, sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>(sql, values);
  return Number(rows[0]!.n);
}
