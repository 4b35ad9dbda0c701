import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type ApiResponse } from "../api/harness.ts";

interface Group {
  groupKey: string;
  type: string;
  itemId?: string;
  notificationsCount: number;
  sampleAccountIds: string[];
  mostRecentNotificationId: string;
  unread: boolean;
}
interface GroupPage {
  groups: Group[];
  nextCursor?: string;
}
interface Unread {
  count: number;
  groups: number;
  lastReadId: string | null;
}

test("api notifications: my grouped notifications page by Link rel=next without repeat or skip; only my own, only with a token; the marker and the unread count; bad input writes nothing; admin lag, rebuild and audit", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const fans = Array.from({ length: 6 }, (_, i) => `fan-${i}`);
  await createAccounts(admin, ["bob", "ann", ...fans]);
  const bob = await h.as("bob");
  const ann = await h.as("ann");
  const posts: string[] = [];
  for (let i = 0; i < 5; i++)
    posts.push(ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: `post ${i}` }), 201).id);
  for (const [i, fan] of fans.entries()) {
    const c = await h.as(fan);
    for (const post of posts.slice(0, i + 1)) ok(await c.put(`/v1/items/${post}/likes/me`));
    ok(await c.put("/v1/accounts/me/following/bob"));
  }
  ok(await bob.put(`/v1/items/${posts[0]}/likes/me`));
  ok(await ann.post(`/v1/posts/${posts[0]}/comments`, { body: "nice" }), 201);

  const status = ok(await admin.get<{ notifications: { source: string; lag: number }[] }>("/v1/admin/status"));
  assert.equal(status.notifications.length, 16, "four sources times four partitions");
  assert.equal(
    status.notifications.reduce((n, w) => n + w.lag, 0),
    20 + 1 + 6 + 1 + 5,
    "every like, follow, comment and post event is pending",
  );
  assert.deepEqual(
    ok(await bob.get<GroupPage>("/v1/notifications")),
    { groups: [] },
    "nothing before the consumer ran",
  );
  const lagMetric = async () => {
    await h.app.metrics.refresh();
    const text = (await h.request("GET", "/metrics")).text;
    return [
      ...text.matchAll(
        /^ledger_lag_events\{view="notifications_(likes|relations|comments|posts)",partition="\d"\} (\d+)$/gm,
      ),
    ].reduce((n, m) => n + Number(m[2]), 0);
  };
  assert.equal(await lagMetric(), 33, "/metrics shows the notification lag per source and partition");
  await h.drain();
  assert.ok(
    ok(await admin.get<{ notifications: { lag: number }[] }>("/v1/admin/status")).notifications.every(
      (w) => w.lag === 0,
    ),
  );
  assert.equal(await lagMetric(), 0);

  const all = ok(await bob.get<GroupPage>("/v1/notifications"));
  t.diagnostic(`note bob: ${all.groups.map((g) => `${g.type}:${g.notificationsCount}`).join(" ")}`);
  assert.deepEqual(
    all.groups.map((g) => `${g.type}:${g.notificationsCount}`),
    ["comment:1", "follow:6", "like:2", "like:3", "like:4", "like:5", "like:6"],
    "post k has 6 - k likers (its author's own like notifies no one); newest group first",
  );
  const seen: string[] = [];
  let path: string | undefined = "/v1/notifications?limit=2";
  let pages = 0;
  while (path) {
    const res: ApiResponse<GroupPage> = await bob.get<GroupPage>(path);
    const page: GroupPage = ok(res);
    seen.push(...page.groups.map((g) => g.groupKey));
    const link: string | null = res.headers.get("link");
    assert.equal(link === null, page.nextCursor === undefined, "Link rel=next exactly when there is a next page");
    path = link ? /^<([^>]+)>; rel="next"$/.exec(link)![1] : undefined;
    pages++;
  }
  assert.equal(pages, 4);
  assert.deepEqual(
    seen,
    all.groups.map((g) => g.groupKey),
  );

  // Only the caller's own: there is no route to ask for someone else's.
  const annGroups = ok(await ann.get<GroupPage>("/v1/notifications")).groups;
  assert.deepEqual(annGroups, []);
  assertError(await h.request("GET", "/v1/notifications"), 401, "UNAUTHENTICATED");
  assertError(await h.request("GET", "/v1/notifications/unread-count"), 401, "UNAUTHENTICATED");
  assertError(
    await h.request("POST", "/v1/notifications/read", { json: { upTo: all.groups[0]!.mostRecentNotificationId } }),
    401,
    "UNAUTHENTICATED",
  );
  // ann marking with bob's id moves only ann's marker, and ann has nothing to mark.
  assert.deepEqual(
    ok(await ann.post<Unread>("/v1/notifications/read", { upTo: all.groups[0]!.mostRecentNotificationId })),
    { count: 0, groups: 0, lastReadId: null },
  );

  assert.deepEqual(ok(await bob.get<Unread>("/v1/notifications/unread-count")), {
    count: 1 + 6 + 20,
    groups: 7,
    lastReadId: null,
  });
  const marked = ok(
    await bob.post<Unread>("/v1/notifications/read", { upTo: all.groups[1]!.mostRecentNotificationId }),
  );
  assert.deepEqual(marked, { count: 1, groups: 1, lastReadId: all.groups[1]!.mostRecentNotificationId });
  assert.deepEqual(
    ok(await bob.get<GroupPage>("/v1/notifications")).groups.map((g) => g.unread),
    [true, false, false, false, false, false, false],
  );
  assertError(await bob.post("/v1/notifications/read", { upTo: "yesterday" }), 400, "INVALID_INPUT");
  assertError(await bob.post("/v1/notifications/read", {}), 400, "INVALID_INPUT");
  assertError(await bob.get("/v1/notifications?cursor=nonsense"), 400, "INVALID_INPUT");
  assert.equal(
    ok(await bob.get<Unread>("/v1/notifications/unread-count")).lastReadId,
    all.groups[1]!.mostRecentNotificationId,
    "bad input moved nothing",
  );

  assertError(await bob.post("/v1/admin/notifications/rebuild", { recipients: ["bob"] }), 403, "FORBIDDEN");
  const rebuilt = ok(
    await admin.post<{ recipientsChecked: number; rowsDrifted: number; rowsPending: number }>(
      "/v1/admin/notifications/rebuild",
      null,
    ),
  );
  assert.deepEqual([rebuilt.recipientsChecked, rebuilt.rowsDrifted, rebuilt.rowsPending], [1, 0, 0]);
  const audit = ok(
    await admin.get<{ clean: boolean; notifications: { extra: number; missing: number } }>("/v1/admin/audit"),
  );
  assert.equal(audit.clean, true);
  assert.deepEqual([audit.notifications.extra, audit.notifications.missing], [0, 0]);
  await h.db.pool.query("UPDATE notification SET active = NOT active WHERE actor = 'fan-0'");
  const broken = ok(
    await admin.get<{ clean: boolean; notifications: { extra: number; missing: number } }>("/v1/admin/audit"),
  );
  assert.equal(broken.clean, false, "the audit sees a view that lies");
  assert.deepEqual([broken.notifications.extra, broken.notifications.missing], [0, 2]);
  const repaired = ok(
    await admin.post<{ rowsDrifted: number; rowsPending: number }>("/v1/admin/notifications/rebuild", {
      recipients: ["bob"],
    }),
  );
  assert.deepEqual([repaired.rowsDrifted, repaired.rowsPending], [2, 0], "the corrupted rows are drift, not lag");
  assert.equal(ok(await admin.get<{ clean: boolean }>("/v1/admin/audit")).clean, true);
});
