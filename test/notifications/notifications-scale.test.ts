import { test } from "node:test";
import assert from "node:assert/strict";
import { auditNotifications, notificationAuditClean } from "../../src/notifications/notification-audit.ts";
import { listNotificationGroups, unreadCount } from "../../src/notifications/notification-reads.ts";
import { drainAll, factRows, notificationFixture, viewRows } from "./fixture.ts";

const USERS = 2000;
const POSTS = 50;

/** The figures of docs/notifications.md: one recipient with thousands of notifications. Timings are notes, never assertions. */
test(`P=4 scale: ${USERS} accounts like 3 of ${POSTS} posts each and half follow: drain, a grouped page, the unread count and a rebuild of the recipient, each exact`, async (t) => {
  const fx = await notificationFixture(4, ["bob"]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  await db.pool.query("INSERT INTO account (account_id) SELECT 'u-' || g FROM generate_series(1, $1::int) g", [USERS]);
  const posts: string[] = [];
  for (let i = 0; i < POSTS; i++) posts.push((await ledger.posts.createPost("bob", "PUBLIC", `post ${i}`)).postId);
  await db.pool.query(
    `SELECT like_set('u-' || g, ($2::text[])[1 + (g * k) % $3], true, ledger_partition('u-' || g, 4))
       FROM generate_series(1, $1::int) g, (VALUES (1), (7), (13)) AS m(k)`,
    [USERS, posts, POSTS],
  );
  await db.pool.query("SELECT relation_follow('u-' || g, 'bob', 4) FROM generate_series(1, $1::int, 2) g", [USERS]);
  const time = async <T>(what: string, run: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    const result = await run();
    t.diagnostic(`note ${what}: ${(performance.now() - started).toFixed(0)} ms`);
    return result;
  };
  const events = (
    await db.pool.query<{ n: number }>(
      "SELECT (SELECT sum(last) FROM like_seq) + (SELECT sum(last) FROM event_seq) AS n",
    )
  ).rows[0]!.n;
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await time(`drain of the notification view (${events} events)`, () => ledger.notifications.drain());
  const facts = await factRows(db.pool);
  t.diagnostic(`note ${facts.length} notifications of one recipient`);
  assert.deepEqual(await viewRows(db.pool), facts);
  const page = await time("a page of all 51 groups", () => listNotificationGroups(db.pool, "bob", { limit: 100 }));
  await time("a second read of it", () => listNotificationGroups(db.pool, "bob", { limit: 100 }));
  if (process.env.NOTIFY_PLAN) {
    const { rows } = await db.pool.query<{ "QUERY PLAN": string }>(`EXPLAIN ANALYZE ${process.env.NOTIFY_PLAN}`);
    t.diagnostic(rows.map((r) => r["QUERY PLAN"]).join("\n"));
  }
  assert.equal(
    page.groups.reduce((n, g) => n + g.notificationsCount, 0),
    facts.length,
    "everything falls in the 51 groups of one window",
  );
  assert.equal(page.groups.length, POSTS + 1);
  const unread = await time("unread count", () => unreadCount(db.pool, "bob"));
  assert.equal(unread.count, facts.length);
  const rebuilt = await time("rebuild of the recipient", () =>
    ledger.notificationRebuild.rebuild({ recipients: ["bob"] }),
  );
  assert.deepEqual([rebuilt.rowsDrifted, rebuilt.rowsPending], [0, 0]);
  const audit = await time("audit", () => auditNotifications(db.pool));
  assert.ok(notificationAuditClean(audit));
  await drainAll(ledger);
});
