import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Page } from "playwright-core";
import { signToken } from "../../src/api/auth.ts";
import { loadConfig } from "../../src/config.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import { startService } from "../../src/runtime/service.ts";
import { loadJwtSecret } from "../../src/runtime/secret.ts";
import { launchChromium } from "../support/browser.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

/** Screenshots of the run, for a person to look at (docs/dashboard.png is one of them). */
const ARTIFACTS = path.resolve("test-artifacts", "dashboard");
const PLOTS = [
  "plot-lag",
  "plot-consumers",
  "plot-outcomes",
  "plot-requests",
  "plot-latency",
  "plot-drift",
  "plot-cache",
];
/** The service's default partition count (a new database gets 16): the size the page must stay readable at. */
const PARTITIONS = 16;
/** A desktop screen: the whole state must be readable at it without scrolling. */
const DESKTOP = { width: 1400, height: 900 };
const ALARM_RED = "rgb(198, 40, 40)";
/** Every browser-side wait; each states what it waited for when it runs out. */
const WAIT_MS = 20_000;
const USERS = Array.from({ length: 24 }, (_, i) => `user-${i}`);
const ITEMS = Array.from({ length: 8 }, (_, i) => `item-${i}`);

interface Call {
  (method: string, path: string, token: string, body?: unknown): Promise<{ status: number; json: unknown }>;
}

function client(baseUrl: string): Call {
  return async (method, urlPath, token, body) => {
    const res = await fetch(`${baseUrl}${urlPath}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? null : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined };
  };
}

/**
 * HTTP load in `lanes` concurrent loops until stopped: likes and unlikes (CHANGED, and NOOP
 * when repeated), follows (some REJECTED: user-0 blocks user-1 and tries to follow them; user-1,
 * to whom user-0 is an unknown account, does not follow user-0), comments on one public post,
 * and like-count reads. Any status but 200, a comment's 201 and the REJECTED follow's 409 is
 * collected and fails the test.
 */
function startLoad(call: Call, tokens: Map<string, string>, lanes: number, postId: string) {
  let running = true;
  const unexpected: string[] = [];
  let requests = 0;
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(Math.random() * xs.length)]!;
  const lane = async () => {
    while (running) {
      const user = pick(USERS);
      const token = tokens.get(user)!;
      const roll = Math.random();
      let res;
      if (roll < 0.6)
        res = await call(Math.random() < 0.75 ? "PUT" : "DELETE", `/v1/items/${pick(ITEMS)}/likes/me`, token);
      else if (roll < 0.75)
        res = await call(
          "PUT",
          `/v1/accounts/me/following/${pick(USERS.filter((u) => u !== user && !(user === "user-1" && u === "user-0")))}`,
          token,
        );
      else if (roll < 0.8) res = await call("PUT", "/v1/accounts/me/following/user-1", tokens.get("user-0")!);
      else if (roll < 0.85)
        res = await call("POST", `/v1/posts/${postId}/comments`, token, { body: `a comment by ${user}` });
      else res = await call("GET", `/v1/items/${pick(ITEMS)}/like-count`, token);
      requests++;
      if (res.status !== 200 && res.status !== 201 && res.status !== 409)
        unexpected.push(`${res.status} ${JSON.stringify(res.json)}`);
    }
  };
  const done = Promise.all(Array.from({ length: lanes }, lane));
  return {
    get requests() {
      return requests;
    },
    async stop() {
      running = false;
      await done;
      return unexpected;
    },
  };
}

/** Runs a page.waitForFunction with WAIT_MS; on timeout, says what it waited for and what the header showed. */
async function waitInPage(
  page: Page,
  what: string,
  wait: (options: { timeout: number; polling: number }) => Promise<unknown>,
): Promise<void> {
  try {
    await wait({ timeout: WAIT_MS, polling: 200 });
  } catch (err) {
    const header = await page
      .locator("header")
      .innerText()
      .catch(() => "(no header)");
    throw new Error(`${what}: not within ${WAIT_MS} ms; the header shows: ${header}`, { cause: err });
  }
}

/**
 * Pixels of a series drawn on each plot's canvas. The dashboard draws axes and grid in grey on
 * white and series in saturated colours only, so a saturated pixel is part of a line or point.
 */
function drawnPixels(page: Page): Promise<Record<string, number>> {
  return page.evaluate((ids) => {
    const counts: Record<string, number> = {};
    for (const id of ids) {
      const canvas = document.querySelector<HTMLCanvasElement>(`#${id} canvas`);
      let n = 0;
      if (canvas && canvas.width > 0 && canvas.height > 0) {
        const { data } = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height);
        for (let i = 0; i < data.length; i += 4) {
          if (
            data[i + 3]! > 128 &&
            Math.max(data[i]!, data[i + 1]!, data[i + 2]!) - Math.min(data[i]!, data[i + 1]!, data[i + 2]!) > 80
          )
            n++;
        }
      }
      counts[id] = n;
    }
    return counts;
  }, PLOTS);
}

/**
 * What uPlot drew, read back from the plots the page exposes (window.dashboardPlots): each plot's
 * x range, its time labels (uPlot's computed axis values) and the p99 plot's series options.
 */
function plotGeometry(page: Page) {
  return page.evaluate(() => {
    const plots = (
      window as unknown as {
        dashboardPlots?: Record<
          string,
          {
            scales: Record<string, { min: number; max: number }>;
            axes: { _values?: (string | null)[] }[];
            series: { label?: string; spanGaps?: boolean; width?: number; points: { show: unknown } }[];
          }
        >;
      }
    ).dashboardPlots;

    if (!plots) return null;
    const x = Object.fromEntries(
      Object.entries(plots).map(([id, u]) => [
        id,
        {
          min: u.scales.x!.min,
          max: u.scales.x!.max,
          timeLabels: (u.axes[0]!._values ?? []).filter((v) => v !== null && v !== ""),
        },
      ]),
    );
    // uPlot keeps points.show as a function of (plot, series index): its default shows points where the data are sparse.
    // (No named functions in here: tsx would wrap them in a helper the page does not have.)
    const latency = plots["plot-latency"]!;
    const p99 = latency.series.slice(1).map((s, i) => ({
      label: s.label,
      spanGaps: s.spanGaps,
      width: s.width,
      points:
        typeof s.points.show === "function"
          ? Boolean((s.points.show as (u: unknown, i: number) => unknown)(latency, i + 1))
          : s.points.show,
    }));
    // Failed passes per second, all zero while every consumer runs: uPlot alone would draw 0-100.
    const failures = plots["plot-consumers"]!.scales.failures!;
    return { now: Date.now() / 1000, x, p99, failures: [failures.min, failures.max] };
  });
}

/** The page's size against the viewport: readable without scrolling means no scrollbar either way. */
function pageSize(page: Page) {
  return page.evaluate(() => ({
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    viewportHeight: window.innerHeight,
    viewportWidth: window.innerWidth,
  }));
}

test("dashboard in Chromium against a service with 16 partitions under load: the whole state fits 1400x900 without scrolling; one summary row per view, details on demand; a lag of 1 is not red, a stalled partition is; every plot draws points over one time window ending now with at least 2 time labels, p99 as lines; a consumer parked at consumer.beforeCommit, a consumer failing 3 passes in a row and a failed audit each turn the header red, and it turns green again; phone width; no console errors", async (t) => {
  // Undone last-first (node runs t.after hooks first-first): the gate before the service, the service before the database.
  const cleanup: (() => unknown)[] = [];
  t.after(async () => {
    for (const undo of cleanup.reverse()) await undo();
  });
  await rm(ARTIFACTS, { recursive: true, force: true });
  await mkdir(ARTIFACTS, { recursive: true });
  const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 2 });
  cleanup.push(() => db.close());
  const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-dashboard-"));
  cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
  // With the Redis count layer, so that its panel plots the cache's hit rate under the load's count reads.
  const redis = await TestRedis.start();
  cleanup.push(() => redis.kill());
  const config = {
    ...loadConfig({
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      LEDGER_DATA_DIR: dataDir,
      LEDGER_JWT_SECRET: randomBytes(32).toString("hex"),
      LEDGER_WRITES_PER_MINUTE: "1000000",
      LEDGER_ALARM_LAG_MS: "4000",
      LEDGER_ALARM_CONSUMER_FAILURES: "3",
      LEDGER_AUDIT_EVERY_MS: "0",
    }),
    port: 0,
  };
  const hooks = new Hooks();
  const service = await startService(config, { logger: false, hooks, dashboard: { sampleMs: 500 } });
  cleanup.push(() => service.stop());
  const secret = await loadJwtSecret(config);
  const call = client(service.address);
  const adminToken = await signToken(secret, "root", { admin: true });
  const tokens = new Map(await Promise.all(USERS.map(async (u) => [u, await signToken(secret, u)] as const)));

  for (const u of USERS)
    assert.equal((await call("PUT", `/v1/accounts/${u}`, adminToken, { private: false })).status, 200);
  for (const item of [...ITEMS, "quiet"])
    assert.equal((await call("PUT", `/v1/items/${item}`, adminToken)).status, 200);
  assert.equal((await call("PUT", "/v1/accounts/me/blocks/user-1", tokens.get("user-0")!)).status, 200);
  const post = await call("POST", "/v1/posts", tokens.get("user-2")!, { visibility: "PUBLIC", body: "comment on me" });
  assert.equal(post.status, 201, JSON.stringify(post.json));
  const load = startLoad(call, tokens, 6, (post.json as { id: string }).id);
  cleanup.push(() => load.stop());

  // Drift for the drift plot: a count corrupted behind the ledger's back, then repaired by a rebuild.
  for (const u of USERS.slice(0, 3))
    assert.equal((await call("PUT", "/v1/items/quiet/likes/me", tokens.get(u)!)).status, 200);
  // The database path (exact=true): the Redis layer may show the 3 likes before the consumers wrote like_count.
  const quietCount = async () =>
    ((await call("GET", "/v1/items/quiet/like-count?exact=true", adminToken)).json as { count: number }).count;
  await pollUntil("the consumers count the 3 likes of 'quiet'", quietCount, (n) => n === 3, WAIT_MS, 50);
  const corruptQuiet = (by: number) =>
    db.pool.query(
      "UPDATE like_count SET n = n + $1 WHERE item_id = 'quiet' AND part = (SELECT min(part) FROM like_count WHERE item_id = 'quiet')",
      [by],
    );
  await corruptQuiet(5);
  const rebuild = await call("POST", "/v1/admin/rebuild", adminToken, { items: ["quiet"] });
  assert.deepEqual((rebuild.json as { totalAbsDrift: number }).totalAbsDrift, 5, JSON.stringify(rebuild.json));
  const audit = await call("GET", "/v1/admin/audit", adminToken);
  assert.equal((audit.json as { clean: boolean }).clean, true, `audit under load: ${JSON.stringify(audit.json)}`);

  const browser = await launchChromium(DESKTOP);
  cleanup.push(() => browser.close());

  // A token without the admin role is refused, and the page says why.
  const refused = await browser.context.newPage();
  await refused.goto(`${service.address}/dashboard`);
  await refused.fill("#token", tokens.get("user-2")!);
  await refused.click("button[type=submit]");
  await waitInPage(refused, "the 403 message", (o) =>
    refused.waitForFunction(() => (document.getElementById("login-error")?.textContent ?? "").includes("403"), null, o),
  );
  assert.equal(await refused.locator("#panels").isHidden(), true, "no dashboard without the admin role");
  await refused.close();

  const page = await browser.context.newPage();
  const consoleErrors: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(message.text());
  });
  page.on("pageerror", (err) => consoleErrors.push(err.message));
  await page.goto(`${service.address}/dashboard`);
  assert.equal(await page.locator("header").getAttribute("data-state"), "signed-out");
  await page.fill("#token", adminToken);
  await page.click("button[type=submit]");

  await waitInPage(page, "every plot drawing points and a green header", (o) =>
    page.waitForFunction(
      (ids) =>
        document.querySelector("header")?.dataset.state === "ok" &&
        ids.every((id) => Number(document.getElementById(id)?.dataset.points ?? 0) > 0),
      PLOTS,
      o,
    ),
  );
  // A few more samples, so that every series of every plot has several points under load.
  const requestsBefore = load.requests;
  const samples = Number(await page.locator("#panels").getAttribute("data-samples"));
  await waitInPage(page, "four more samples", (o) =>
    page.waitForFunction((n) => Number(document.getElementById("panels")?.dataset.samples) >= n, samples + 4, o),
  );
  const pixels = await drawnPixels(page);
  t.diagnostic(
    `note drawn pixels per plot at ${DESKTOP.width} px: ${JSON.stringify(pixels)}; requests so far ${load.requests}`,
  );
  for (const id of PLOTS) assert.ok(pixels[id]! > 50, `${id} drew ${pixels[id]} series pixels`);
  assert.ok(load.requests > requestsBefore, "the load is running");

  // Every measure first (the note shows them all when one fails), then the checks.
  const size = await pageSize(page);
  const geometry = await plotGeometry(page);
  t.diagnostic(`note page ${JSON.stringify(size)}; plots ${JSON.stringify(geometry)}`);
  assert.ok(
    size.height <= size.viewportHeight && size.width <= size.viewportWidth,
    `the whole state is readable without scrolling at ${DESKTOP.width}x${DESKTOP.height} with ${PARTITIONS} partitions: the page is ${size.width}x${size.height}`,
  );
  assert.ok(geometry, "the page exposes its plots as window.dashboardPlots");
  const ranges = Object.entries(geometry.x);
  assert.deepEqual(ranges.map(([id]) => id).sort(), [...PLOTS].sort());
  const [first] = ranges[0]!;
  for (const [id, range] of ranges) {
    assert.deepEqual(
      [range.min, range.max],
      [geometry.x[first]!.min, geometry.x[first]!.max],
      `${id} shares ${first}'s time window`,
    );
    assert.ok(range.max <= geometry.now, `${id}'s time axis ends at ${range.max}, after now (${geometry.now})`);
    assert.ok(
      range.timeLabels.length >= 2,
      `${id} has ${range.timeLabels.length} time labels: ${JSON.stringify(range.timeLabels)}`,
    );
  }
  assert.ok(
    geometry.now - geometry.x[first]!.max < 10,
    `the window ends now, not ${geometry.now - geometry.x[first]!.max} s ago`,
  );
  assert.deepEqual(geometry.failures, [0, 1], "an all-zero series gets a small range");
  for (const series of geometry.p99) {
    assert.deepEqual(
      [series.spanGaps, series.points],
      [true, false],
      `p99 of ${series.label} is a line through the intervals it has, not dots`,
    );
    assert.ok(series.width! > 0, `p99 of ${series.label} draws a line`);
  }

  // One summary row per view; its partitions and loops are details, closed until asked for.
  const summary = await page.locator("#views tbody tr").evaluateAll((rows) =>
    rows.map((r) => ({
      view: (r as HTMLElement).dataset.view,
      cells: [...r.querySelectorAll("td")].map((td) => td.textContent ?? ""),
    })),
  );
  t.diagnostic(`note view summary: ${JSON.stringify(summary)}`);
  assert.deepEqual(
    summary.map((r) => r.view),
    ["like_count", "follower_projection", "comment_count"],
  );
  for (const {
    view,
    cells: [name, lag, worst, applied, loops, state],
  } of summary) {
    assert.equal(name, view);
    assert.match(lag!, /^\d+$/, `${view}'s total lag`);
    assert.match(worst!, /^(p\d+: lag [1-9]\d*|none lagging)$/, `${view}'s worst partition`);
    assert.ok(Number(applied) > 0, `${view} applied events: ${applied}`);
    assert.equal(loops, "4", `${view}'s consumer loops`);
    assert.match(state!, /^(catching up|caught up)$/, `${view} without an alarm`);
  }
  assert.equal(
    await page.locator("#partition-details").evaluate((d) => (d as HTMLDetailsElement).open),
    false,
    "partition details closed",
  );
  assert.equal(
    await page.locator("#watermarks").isVisible(),
    false,
    "the per-partition table is hidden until asked for",
  );
  assert.equal(
    await page.locator("#watermarks tbody tr").count(),
    PARTITIONS,
    "one row per partition, a watermark and a lag per view",
  );
  assert.equal(await page.locator("#watermarks tbody tr").first().locator("td").count(), 7);
  assert.equal(
    await page.locator("#consumers tbody tr").count(),
    4,
    "loops #0-3 of like-counter, follower-projector and comment-counter",
  );
  assert.equal(await page.locator("#consumers tbody tr").first().locator("td").count(), 4);
  assert.match(await page.locator("#loop-count").innerText(), /^12 loops, /);
  assert.match(await page.locator("#audit").innerText(), /^clean at .* \(api\)$/);
  assert.match(await page.locator("#rebuild").innerText(), /1 drifted, total \|drift\| 5$/);
  assert.equal(await page.locator("#cache").getAttribute("data-configured"), "true");
  assert.match(await page.locator("#cache-state").innerText(), /^Redis count layer: up$/);
  assert.equal(await page.locator("#login").isHidden(), true, "the token form is gone once signed in");
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-1400.png"), fullPage: true });

  // A lag of 1 under load is a burst being worked off, not an alarm: wait for a partition with lag
  // under a green header, and read every lagging cell's colour in that same moment.
  await page.click("#partition-details summary");
  const lagging = await page
    .waitForFunction(
      () => {
        if (document.querySelector("header")?.dataset.state !== "ok") return false;
        const cells = [...document.querySelectorAll<HTMLElement>("#watermarks td[data-view]")].filter(
          (td) => Number(td.textContent) > 0,
        );
        const worst = [...document.querySelectorAll<HTMLElement>("#views tbody tr td:nth-child(3)")].filter((td) =>
          /lag [1-9]/.test(td.textContent ?? ""),
        );
        if (cells.length === 0) return false;
        return [...cells, ...worst].map((td) => ({
          text: td.textContent,
          color: getComputedStyle(td).color,
          className: td.className,
        }));
      },
      null,
      { timeout: WAIT_MS, polling: 200 },
    )
    .then((h) => h.jsonValue());
  t.diagnostic(`note lagging cells under a green header: ${JSON.stringify(lagging)}`);
  assert.ok(Array.isArray(lagging) && lagging.length > 0);
  for (const c of lagging)
    assert.ok(
      c.color !== ALARM_RED && c.className !== "alarm",
      `lag ${c.text} without an alarm is painted ${c.color} (${c.className})`,
    );
  assert.equal(await page.locator("#watermarks").isVisible(), true, "the per-partition table opens on demand");
  await page.click("#partition-details summary");

  // A stuck consumer: every like-counter loop parks before its commit, the watermarks stand still under load.
  const gate = new Gate("consumer.beforeCommit");
  const off = hooks.on("consumer.beforeCommit", gate.handler);
  // Released in any case: the service's stop waits for its parked consumers.
  cleanup.push(() => {
    off();
    gate.release();
  });
  await gate.waitArrived();
  // Red first with "lag grew" (the loops commit once more before each reaches the gate), then
  // with "watermark stalled" once no watermark of the view has moved for the threshold.
  await waitInPage(page, "a red header saying like_count watermarks stalled", (o) =>
    page.waitForFunction(
      () =>
        document.querySelector("header")?.dataset.state === "alarm" &&
        [...document.querySelectorAll("#reasons li")].some((li) =>
          /^like_count partitions? [\d, -]+: watermarks? stalled (at \d+ )?for \d+ s with lag [1-9]/.test(
            li.textContent ?? "",
          ),
        ),
      null,
      o,
    ),
  );
  t.diagnostic(
    `note header while the consumer is parked: ${JSON.stringify(await page.locator("#reasons li").allInnerTexts())}`,
  );
  assert.equal(await page.locator("header").evaluate((h) => getComputedStyle(h).backgroundColor), ALARM_RED);
  // The control of the lag-1 check: the partitions the rule names are red, in the summary and in the details.
  await waitInPage(page, "like_count's summary row red with its stalled partitions", (o) =>
    page.waitForFunction(
      () =>
        (document.querySelector("#views tr[data-view=like_count] td:last-child")?.textContent ?? "").startsWith(
          "watermark stalled: p",
        ),
      null,
      o,
    ),
  );
  const stalledRow = await page
    .locator("#views tr[data-view=like_count] td")
    .evaluateAll((tds) => tds.map((td) => ({ text: td.textContent, color: getComputedStyle(td).color })));
  t.diagnostic(`note like_count's summary while parked: ${JSON.stringify(stalledRow)}`);
  assert.match(stalledRow[5]!.text!, /^watermark stalled: p\d+/);
  assert.equal(stalledRow[5]!.color, ALARM_RED);
  assert.equal(stalledRow[2]!.color, ALARM_RED, "the worst partition is a stalled one");
  const redLags = await page
    .locator("#watermarks td.alarm[data-view=like_count]")
    .evaluateAll((tds) => tds.map((td) => getComputedStyle(td).color));
  assert.ok(
    redLags.length > 0 && redLags.every((c) => c === ALARM_RED),
    `stalled partitions red in the details: ${JSON.stringify(redLags)}`,
  );
  const alarmSize = await pageSize(page);
  assert.ok(
    alarmSize.height <= alarmSize.viewportHeight,
    `the alarm fits the screen too: the page is ${alarmSize.height} px tall`,
  );
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-alarm.png") });
  off();
  gate.release();

  // A failing consumer: every like-counter pass throws before its commit (and rolls back).
  const offFailing = hooks.on("consumer.beforeCommit", () => {
    throw new Error("injected by the dashboard test");
  });
  cleanup.push(offFailing);
  await waitInPage(page, "a red header saying a consumer failed 3 passes in a row", (o) =>
    page.waitForFunction(
      () =>
        [...document.querySelectorAll("#reasons li")].some((li) =>
          /^consumer like-counter#\d failed \d+ passes in a row$/.test(li.textContent ?? ""),
        ),
      null,
      o,
    ),
  );
  t.diagnostic(
    `note header while the consumer fails: ${JSON.stringify(await page.locator("#reasons li").allInnerTexts())}`,
  );
  offFailing();

  // Recovered (and the load stopped, so the lag drains to zero), the header turns green again.
  assert.deepEqual(await load.stop(), [], "unexpected statuses under load");
  await waitInPage(page, "a green header once the consumer runs again", (o) =>
    page.waitForFunction(() => document.querySelector("header")?.dataset.state === "ok", null, o),
  );

  // A failed audit turns it red; a rebuild and a clean audit turn it green.
  await corruptQuiet(2);
  await page.click("#run-audit");
  await waitInPage(page, "a red header for the failed audit", (o) =>
    page.waitForFunction(() => document.querySelector("header")?.dataset.state === "alarm", null, o),
  );
  assert.match(await page.locator("#reasons").innerText(), /^audit found violations at /);
  assert.equal(await page.locator("#audit").getAttribute("data-clean"), "false");
  assert.equal(
    ((await call("POST", "/v1/admin/rebuild", adminToken, { items: ["quiet"] })).json as { totalAbsDrift: number })
      .totalAbsDrift,
    2,
  );
  await page.click("#run-audit");
  await waitInPage(page, "a green header and the second rebuild run", (o) =>
    page.waitForFunction(
      () =>
        document.querySelector("header")?.dataset.state === "ok" &&
        (document.getElementById("rebuild")?.textContent ?? "").endsWith("total |drift| 2") &&
        document.getElementById("plot-drift")?.dataset.points === "4",
      null,
      o,
    ),
  );

  // Phone width: one column, nothing wider than the screen, the plots redrawn at the new width.
  await page.setViewportSize({ width: 390, height: 844 });
  await waitInPage(page, "plots resized to the phone's width", (o) =>
    page.waitForFunction(
      () =>
        [...document.querySelectorAll("canvas")].every((c) => c.getBoundingClientRect().width <= 390) &&
        document.documentElement.scrollWidth <= 390,
      null,
      o,
    ),
  );
  const phonePixels = await drawnPixels(page);
  for (const id of PLOTS)
    assert.ok(phonePixels[id]! > 50, `${id} drew ${phonePixels[id]} series pixels at phone width`);
  const phoneGeometry = await plotGeometry(page);
  for (const [id, range] of Object.entries(phoneGeometry!.x)) {
    assert.ok(
      range.timeLabels.length >= 2,
      `${id} has ${range.timeLabels.length} time labels at phone width: ${JSON.stringify(range.timeLabels)}`,
    );
  }
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-phone.png"), fullPage: true });

  assert.deepEqual(consoleErrors, [], "console errors in the page");
});
