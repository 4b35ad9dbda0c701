import { test } from "node:test";
import assert from "node:assert/strict";
import { PARTITIONED_ROW_TABLES } from "../../src/db/ledger-config.ts";
import { loadMigrations, migrate, type Migration } from "../../src/db/migrate.ts";
import { openLedger } from "../../src/ledger.ts";
import { auditNotifications } from "../../src/notifications/notification-audit.ts";
import { createEmptyDatabase } from "../support/test-db.ts";
import { factRows, viewRows } from "./fixture.ts";

const MIGRATION = "036_reply_mention_notifications.sql";

/**
 * A database with comments and replies whose notification view was exact before the migration
 * that adds replies and mentions (installed from the old notification_truth, every watermark at
 * its sequence's end), migrated with `edit` applied to that migration's text.
 */
async function migratedWithReplies(
  t: { after(fn: () => Promise<void>): void },
  edit: (sql: string) => string = (sql) => sql,
) {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  const all = await loadMigrations();
  const index = all.findIndex((m) => m.name === MIGRATION);
  await migrate(db.pool, all.slice(0, index));
  // initLedger as it was before the migration: the tables it adds do not exist yet.
  await db.pool.query("INSERT INTO ledger_config (partitions) VALUES (2)");
  for (const table of PARTITIONED_ROW_TABLES.filter((x) => x !== "notification_post_watermark"))
    await db.pool.query(`INSERT INTO ${table} (part) VALUES (0), (1)`);
  const ledger = await openLedger(db.pool);
  for (const a of ["ann", "bob", "cat", "dan"]) await ledger.relations.upsertAccount(a);
  const post = await ledger.posts.createPost("bob", "PUBLIC", "p");
  const top = await ledger.comments.create("cat", post.postId, "top");
  await ledger.comments.create("dan", post.postId, "re", { parentId: top.id });
  await ledger.comments.create("ann", post.postId, "re too", { parentId: top.id });
  const bobs = await ledger.comments.create("bob", post.postId, "own");
  await ledger.comments.create("cat", post.postId, "to bob", { parentId: bobs.id });
  await ledger.likes.like("ann", post.postId);
  await db.pool.query(
    `INSERT INTO notification (source, actor, subject, recipient, type, item_id, active, version, at, id, group_key, part, seq)
     SELECT t.source, t.actor, t.subject, t.recipient, t.type, t.item_id, t.active, t.version, t.at,
            notification_id(t.at, t.source, t.actor, t.subject, t.version),
            notification_group_key(t.type, t.item_id, t.at, notification_id(t.at, t.source, t.actor, t.subject, t.version)), 0, 0
       FROM notification_truth t`,
  );
  for (const [w, s] of [
    ["notification_like_watermark", "like_seq"],
    ["notification_relation_watermark", "event_seq"],
    ["notification_comment_watermark", "comment_seq"],
  ])
    await db.pool.query(`UPDATE ${w} w SET applied_upto = s.last FROM ${s} s WHERE s.part = w.part`);
  const before = await viewRows(db.pool);
  const rest: Migration[] = all.slice(index).map((m) => (m.name === MIGRATION ? { ...m, sql: edit(m.sql) } : m));
  await migrate(db.pool, [...all.slice(0, index), ...rest]);
  return { db, before };
}

test("the migration keeps an exact view exact: the rows before stay, the replies written before it are installed", async (t) => {
  const { db, before } = await migratedWithReplies(t);
  const after = await viewRows(db.pool);
  const added = after.filter((r) => !before.includes(r));
  assert.deepEqual(
    added.map((r) => r.replace(/^comment (\S+) \S+ cat reply$/, "$1 replied to cat")),
    ["ann replied to cat", "dan replied to cat"],
    "the two replies to cat; bob, replied to on his own post, keeps his comment notification",
  );
  assert.ok(
    before.every((r) => after.includes(r)),
    "every row before is still there",
  );
  assert.deepEqual(after, await factRows(db.pool));
  const audit = await auditNotifications(db.pool);
  assert.deepEqual([audit.extra, audit.missing, audit.differing, audit.lag], [0, 0, 0, 0], JSON.stringify(audit));
});

test("negative control: without the install the audit sees the two replies written before it as missing", async (t) => {
  const { db } = await migratedWithReplies(t, (sql) => sql.slice(0, sql.lastIndexOf("INSERT INTO notification")));
  const audit = await auditNotifications(db.pool);
  assert.equal(audit.missing, 2, JSON.stringify(audit));
});
