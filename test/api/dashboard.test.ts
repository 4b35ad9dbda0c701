import { test } from "node:test";
import assert from "node:assert/strict";
import { evaluateStatus, type AlarmThresholds } from "../../src/api/dashboard/alarms.ts";
import type { DriftRun, LastAudit, Sample } from "../../src/api/dashboard/types.ts";
import { assertError, createAccounts, ok, startApi } from "./harness.ts";

const thresholds: AlarmThresholds = { lagMs: 3_000, consumerFailures: 3 };

/** One sample a second: like_count partition 0 with the given lag and watermark, everything else caught up. */
function series(points: [lag: number, appliedUpto: number][], t0 = 0): Sample[] {
  return points.map(([lag, appliedUpto], i) => ({
    t: t0 + i * 1000,
    views: {
      like_count: { lag: [lag, 0], appliedUpto: [appliedUpto, 50] },
      follower_projection: { lag: [0], appliedUpto: [7] },
      comment_count: { lag: [0], appliedUpto: [3] },
    },
    rates: null,
    failedInARow: { like_count: 0, follower_projection: 0, comment_count: 0 },
    pool: { connections: 1, idle: 1, max: 10, waiting: 0 },
  }));
}

function status(
  samples: Sample[],
  extra: { consumers?: { name: string; kind: "like_count"; failedInARow: number }[]; audit?: LastAudit } = {},
) {
  return evaluateStatus({
    now: samples.at(-1)?.t ?? 0,
    samples,
    consumers: extra.consumers ?? [],
    audit: extra.audit ?? null,
    thresholds,
  });
}

test("dashboard alarms: a partition whose watermark stands still (or whose lag grows at every sample) for the threshold turns the header red; lag that moves, a younger history and failures below N do not", () => {
  assert.deepEqual(
    status(
      series([
        [5, 10],
        [9, 10],
        [12, 10],
        [20, 10],
      ]),
    ),
    {
      state: "alarm",
      reasons: ["like_count partition 0: watermark stalled at 10 for 3 s with lag 20"],
      partitions: [{ view: "like_count", part: 0, rule: "stalled" }],
    },
  );
  const growing = status(
    series([
      [5, 10],
      [9, 11],
      [12, 13],
      [20, 14],
    ]),
  );
  assert.deepEqual(growing.reasons, ["like_count partition 0: lag grew from 5 to 20 over 3 s"]);
  assert.deepEqual(growing.partitions, [{ view: "like_count", part: 0, rule: "growing" }]);
  // Negative controls: the same figures minus the condition. None names a partition, so the page paints none red.
  for (const [what, points] of [
    [
      "a stall shorter than the threshold",
      [
        [5, 10],
        [9, 10],
        [12, 10],
      ],
    ],
    [
      "lag that came down once is being worked off",
      [
        [5, 10],
        [9, 11],
        [8, 13],
        [20, 14],
      ],
    ],
    [
      "lag that reached zero inside the window",
      [
        [5, 10],
        [0, 15],
        [12, 15],
        [20, 15],
      ],
    ],
    [
      "an idle partition",
      [
        [0, 10],
        [0, 10],
        [0, 10],
        [0, 10],
      ],
    ],
    [
      "a lag of 1 that moves (a busy partition)",
      [
        [1, 10],
        [1, 11],
        [1, 12],
        [1, 13],
      ],
    ],
  ] as [string, [number, number][]][]) {
    assert.deepEqual(status(series(points)), { state: "ok", reasons: [], partitions: [] }, what);
  }
  assert.equal(status([]).state, "ok", "no samples yet");

  // A stuck consumer stalls every partition it serves: one sentence per view and rule, every partition named.
  const wide: Sample[] = [0, 1, 2, 3].map((i) => ({
    ...series([[0, 0]], i * 1000)[0]!,
    views: {
      like_count: { lag: [3, 4 + i, 1, 2 + i, 0, 1], appliedUpto: [10, 20, 30, 40 + i, 50, 60 + i] },
      follower_projection: { lag: [0], appliedUpto: [7] },
      comment_count: { lag: [2 + i, 5 + 2 * i], appliedUpto: [3 + i, 8 + i] },
    },
  }));
  const wideStatus = status(wide);
  assert.deepEqual(wideStatus.reasons, [
    "like_count partitions 0-2: watermarks stalled for 3 s with lag 1 to 7",
    "like_count partition 3: lag grew from 2 to 5 over 3 s",
    "comment_count partitions 0-1: lag grew at every sample over 3 s, now 5 to 11",
  ]);
  assert.deepEqual(
    wideStatus.partitions.map((p) => `${p.view}/${p.part}:${p.rule}`),
    [
      "like_count/0:stalled",
      "like_count/1:stalled",
      "like_count/2:stalled",
      "like_count/3:growing",
      "comment_count/0:growing",
      "comment_count/1:growing",
    ],
    "partition 5 has lag 1 and moves: not named",
  );

  const loop = (failedInARow: number) => ({ name: "like-counter#0", kind: "like_count" as const, failedInARow });
  assert.deepEqual(status(series([[0, 1]]), { consumers: [loop(3)] }).reasons, [
    "consumer like-counter#0 failed 3 passes in a row",
  ]);
  assert.equal(status(series([[0, 1]]), { consumers: [loop(2)] }).state, "ok");

  const audit = (clean: boolean): LastAudit => ({
    at: Date.UTC(2026, 0, 2, 3, 4, 5),
    clean,
    source: "api",
    report: {},
  });
  assert.deepEqual(status(series([[0, 1]]), { audit: audit(false) }).reasons, [
    "audit found violations at 2026-01-02T03:04:05.000Z",
  ]);
  assert.equal(status(series([[0, 1]]), { audit: audit(true) }).state, "ok");

  const down = series([
    [0, 1],
    [0, 1],
  ]);
  down[1]!.views = null;
  assert.deepEqual(status(down).reasons, ["the database did not answer at 1970-01-01T00:00:01.000Z"]);
});

interface Dashboard {
  now: number;
  sampleMs: number;
  partitions: number;
  thresholds: AlarmThresholds;
  status: { state: string; reasons: string[]; partitions: unknown[] };
  samples: Sample[];
  consumers: unknown[];
  audit: LastAudit | null;
  drift: { like_count: DriftRun[]; comment_count: DriftRun[] };
  watermarks: { view: string; part: number; appliedUpto: number; lag: number; at: number }[];
  cache: { configured: boolean; state: string };
}

test("GET /v1/admin/dashboard: admin only; samples hold lag per partition, outcome and request rates, the unique insert rate; drift runs come from the database; since= returns only newer samples", async (t) => {
  const h = await startApi({ partitions: 2 });
  t.after(() => h.close());
  // The app's sampler took its first sample at listen; from here the test samples by hand.
  const sampler = h.app.dashboard;
  await sampler.stop();
  const admin = await h.as("root", { admin: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");

  assertError(await h.request("GET", "/v1/admin/dashboard"), 401, "UNAUTHENTICATED");
  assertError(await alice.get("/v1/admin/dashboard"), 403, "FORBIDDEN");
  assertError(await admin.get("/v1/admin/dashboard?since=yesterday"), 400, "INVALID_INPUT");

  ok(await admin.put("/v1/items/item-1"));
  await createAccounts(admin, ["alice", "bob"]);
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  const post = ok(await alice.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  ok(await alice.post(`/v1/posts/${post.id}/comments`, { body: "first" }), 201);
  await sampler.sampleOnce();
  ok(await alice.put("/v1/items/item-1/likes/me"));
  ok(await bob.put("/v1/items/item-1/likes/me"));
  ok(await alice.put("/v1/items/item-1/likes/me")); // NOOP: a retry
  assert.equal((await alice.put("/v1/accounts/me/following/bob")).status, 409); // REJECTED: alice blocks bob
  await sampler.sampleOnce();

  const first = ok(await admin.get<Dashboard>("/v1/admin/dashboard"));
  assert.equal(first.partitions, 2);
  assert.deepEqual(first.cache, { configured: false, state: "off" });
  assert.deepEqual(
    first.status,
    { state: "ok", reasons: [], partitions: [] },
    "lag without a stall names no partition (and the field is in the response schema)",
  );
  assert.ok(first.samples.length >= 3, `samples: ${first.samples.length}`);
  const newest = first.samples.at(-1)!;
  const lag = newest.views!.like_count.lag;
  assert.equal(lag.length, 2);
  assert.equal(lag[0]! + lag[1]!, 2, "two CHANGED likes, no consumer ran");
  const rates = newest.rates!;
  const perInterval = (perSec: number) => Math.round(perSec * rates.seconds);
  assert.deepEqual([rates.outcomes.CHANGED, rates.outcomes.NOOP, rates.outcomes.REJECTED].map(perInterval), [2, 1, 1]);
  assert.equal(rates.uniqueInsertRatio, 0.67, "2 CHANGED of 3 like requests");
  assert.equal(perInterval(rates.requests.likes.perSec), 3);
  assert.equal(perInterval(rates.requests.relations.perSec), 1);
  assert.equal(typeof rates.requests.likes.p99Ms, "number");
  assert.equal(rates.requests.posts.p99Ms, null, "no post request in the interval");
  // The runtime: this process's event-loop delay over the interval and its PostgreSQL pool.
  assert.ok(
    rates.eventLoop.p99Ms > 0 && rates.eventLoop.maxMs >= rates.eventLoop.p99Ms,
    JSON.stringify(rates.eventLoop),
  );
  assert.ok(
    perInterval(rates.checkouts.perSec) >= 4,
    `the interval's requests checked out connections: ${JSON.stringify(rates.checkouts)}`,
  );
  assert.equal(rates.checkouts.slowPerSec, 0, "none waited over 100 ms: the pool had idle connections");
  assert.equal(newest.pool.max, 10);
  assert.equal(newest.pool.waiting, 0);
  assert.ok(newest.pool.connections >= 1 && newest.pool.idle <= newest.pool.connections, JSON.stringify(newest.pool));
  const commentLag = newest.views!.comment_count.lag;
  assert.equal(commentLag[0]! + commentLag[1]!, 1, "one comment, no consumer ran");
  assert.deepEqual(first.watermarks.map((w) => `${w.view}/${w.part}:${w.lag}`).sort(), [
    `comment_count/0:${commentLag[0]}`,
    `comment_count/1:${commentLag[1]}`,
    "follower_projection/0:0",
    "follower_projection/1:0",
    `like_count/0:${lag[0]}`,
    `like_count/1:${lag[1]}`,
  ]);
  assert.equal(first.audit, null, "no audit yet");
  assert.deepEqual(first.drift, { like_count: [], comment_count: [] });

  // The audit through the API and a rebuild with drift both show at the next sample.
  await h.drain();
  await h.db.pool.query(
    "UPDATE like_count SET n = n + 3 WHERE item_id = 'item-1' AND part = (SELECT min(part) FROM like_count WHERE item_id = 'item-1')",
  );
  assert.equal(ok(await admin.get<{ clean: boolean }>("/v1/admin/audit")).clean, false);
  ok(await admin.post("/v1/admin/rebuild"));
  await sampler.sampleOnce();
  const second = ok(await admin.get<Dashboard>(`/v1/admin/dashboard?since=${newest.t}`));
  assert.equal(second.samples.length, 1, "only the sample after `since`");
  assert.equal(second.audit?.clean, false);
  assert.equal(second.audit?.source, "api");
  assert.equal(second.status.state, "alarm");
  assert.match(second.status.reasons.join("; "), /^audit found violations at /);
  assert.deepEqual(
    second.drift.like_count.map((r) => [r.itemsDrifted, r.totalAbsDrift]),
    [[1, 3]],
  );
  assert.ok(
    second.watermarks.every((w) => w.lag === 0),
    JSON.stringify(second.watermarks),
  );
});

test("GET /dashboard serves the page with a content security policy; its modules and the vendored uPlot are static files; nothing else of uPlot's package is served", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const page = await h.request("GET", "/dashboard");
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
  assert.match(page.headers.get("content-security-policy") ?? "", /default-src 'self'/);
  assert.match(page.text, /<script src="\/dashboard\/vendor\/uplot\/uPlot\.iife\.min\.js"/);
  assert.match(page.text, /<script src="\/dashboard\/assets\/dashboard\.js" type="module">/);
  for (const [file, type] of [
    ["/dashboard/assets/dashboard.js", /javascript/],
    ["/dashboard/assets/plots.js", /javascript/],
    ["/dashboard/assets/state.js", /javascript/],
    ["/dashboard/assets/dashboard.css", /text\/css/],
    ["/dashboard/vendor/uplot/uPlot.iife.min.js", /javascript/],
    ["/dashboard/vendor/uplot/uPlot.min.css", /text\/css/],
  ] as const) {
    const res = await h.request("GET", file);
    assert.equal(res.status, 200, file);
    assert.match(res.headers.get("content-type") ?? "", type, file);
  }
  assert.equal((await h.request("GET", "/dashboard/vendor/uplot/uPlot.d.ts")).status, 404);
  assert.equal((await h.request("GET", "/dashboard/assets/%2e%2e/routes.ts")).status, 404);
});
