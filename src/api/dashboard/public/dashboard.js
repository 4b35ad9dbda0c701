// The operator dashboard: asks for an admin token (kept in this closure only, never stored),
// polls GET /v1/admin/dashboard for the samples it has not seen, and draws them with uPlot.
// docs/dashboard.md describes the endpoint and the alarms.
"use strict";

(() => {
  const HISTORY_MS = 60 * 60 * 1000;
  const MIN_POLL_MS = 1000;
  const VIEWS = ["like_count", "follower_projection", "comment_count"];
  /** The views that are counters, with rebuild runs and their drift. */
  const COUNTER_VIEWS = ["like_count", "comment_count"];
  const ROUTE_GROUPS = ["likes", "relations", "posts", "comments", "admin", "health", "other"];
  const OUTCOMES = ["CHANGED", "NOOP", "REJECTED"];
  /** Counter kinds of the Redis count layer (rates.countCache is keyed by them). */
  const COUNT_KINDS = ["likes", "followers", "comments"];
  /** Saturated colours only: grid, axes and background are grey or white, so a drawn series is the only colour on a canvas. */
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#e377c2", "#17becf", "#8c564b", "#bcbd22", "#0b3d91"];
  /** Per-partition lines up to this many partitions; beyond it the lag plot shows each view's total and its worst partition. */
  const MAX_PARTITION_LINES = 8;

  const $ = (id) => document.getElementById(id);
  let token = null;
  let samples = [];
  let latest = null;
  let plots = null;
  let pollTimer = null;

  function color(i) {
    return PALETTE[i % PALETTE.length];
  }

  function line(label, i, extra = {}) {
    return { label, stroke: color(i), width: 1.5, spanGaps: false, ...extra };
  }

  /** The plots: each one its series, its y axes and how a sample becomes a point. */
  function plotSpecs(partitions) {
    const partitionLines = partitions <= MAX_PARTITION_LINES;
    const lagSeries = [];
    const lagValues = [];
    const lagOf = (s, view, part) => (s.views ? s.views[view].lag[part] ?? null : null);
    const total = (s, view) => (s.views ? s.views[view].lag.reduce((a, b) => a + b, 0) : null);
    const worst = (s, view) => (s.views ? Math.max(0, ...s.views[view].lag) : null);
    for (const view of VIEWS) {
      lagSeries.push(line(`${view} total`, lagSeries.length, { width: 2.5 }));
      lagValues.push((s) => total(s, view));
      if (partitionLines) {
        for (let part = 0; part < partitions; part++) {
          lagSeries.push(line(`${view} p${part}`, lagSeries.length));
          lagValues.push((s) => lagOf(s, view, part));
        }
      } else {
        lagSeries.push(line(`${view} worst partition`, lagSeries.length));
        lagValues.push((s) => worst(s, view));
      }
    }
    const rate = (pick) => (s) => (s.rates ? pick(s.rates) : null);
    return {
      "plot-lag": { series: lagSeries, values: lagValues, axes: [{ label: "events" }] },
      "plot-consumers": {
        series: [
          ...VIEWS.map((v, i) => line(`${v} applied/s`, i)),
          ...VIEWS.map((v, i) => line(`${v} failed passes/s`, i + VIEWS.length, { scale: "failures", dash: [6, 4] })),
        ],
        values: [
          ...VIEWS.map((v) => rate((r) => r.consumers[v].appliedPerSec)),
          ...VIEWS.map((v) => rate((r) => r.consumers[v].failuresPerSec)),
        ],
        axes: [{ label: "events/s" }, { label: "failed passes/s", scale: "failures" }],
      },
      "plot-outcomes": {
        series: [
          ...OUTCOMES.map((o, i) => line(`${o}/s`, i)),
          line("unique insert rate %", OUTCOMES.length, { scale: "percent", dash: [6, 4] }),
        ],
        values: [
          ...OUTCOMES.map((o) => rate((r) => r.outcomes[o])),
          rate((r) => (r.uniqueInsertRatio === null ? null : Math.round(r.uniqueInsertRatio * 1000) / 10)),
        ],
        axes: [{ label: "writes/s" }, { label: "unique inserts %", scale: "percent" }],
        scales: { percent: { range: [0, 100] } },
      },
      "plot-requests": {
        series: ROUTE_GROUPS.map((g, i) => line(g, i)),
        values: ROUTE_GROUPS.map((g) => rate((r) => r.requests[g].perSec)),
        axes: [{ label: "requests/s" }],
      },
      "plot-cache": {
        series: [
          ...COUNT_KINDS.map((k, i) => line(`${k} hit %`, i, { scale: "percent" })),
          line("lookups/s", COUNT_KINDS.length, { scale: "rate", dash: [6, 4] }),
          line("fallbacks/s", COUNT_KINDS.length + 1, { scale: "rate", dash: [2, 3] }),
        ],
        values: [
          ...COUNT_KINDS.map((k) => rate((r) => {
            const c = r.countCache ? r.countCache[k] : undefined;
            return c && c.hitRatio !== null ? Math.round(c.hitRatio * 1000) / 10 : null;
          })),
          rate((r) => cacheSum(r, "lookupsPerSec")),
          rate((r) => cacheSum(r, "fallbacksPerSec")),
        ],
        axes: [{ label: "hit %", scale: "percent" }, { label: "per second", scale: "rate" }],
        scales: { percent: { range: [0, 100] } },
      },
      "plot-latency": {
        series: ROUTE_GROUPS.map((g, i) => line(g, i, { points: { show: true, size: 4 } })),
        values: ROUTE_GROUPS.map((g) => rate((r) => r.requests[g].p99Ms)),
        axes: [{ label: "ms" }],
      },
    };
  }

  /** A figure of the count cache summed over the kinds; null when this process has no cache lookups at all. */
  function cacheSum(rates, field) {
    const kinds = Object.values(rates.countCache || {});
    return kinds.length === 0 ? null : kinds.reduce((sum, k) => sum + k[field], 0);
  }

  function makePlot(id, spec) {
    const chart = $(id).querySelector(".chart");
    const axes = [{}];
    spec.axes.forEach((a, i) => {
      axes.push({ scale: a.scale ?? "y", label: a.label, side: i === 0 ? 3 : 1, grid: { show: i === 0 }, size: 55 });
    });
    const opts = {
      width: Math.max(200, chart.clientWidth),
      height: 220,
      series: [{}, ...spec.series],
      axes,
      scales: { x: { time: true }, ...spec.scales },
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
    };
    const empty = [[], ...spec.series.map(() => [])];
    return { id, spec, chart, uplot: new uPlot(opts, empty, chart) };
  }

  function driftSpec() {
    const point = (i) => ({ show: true, size: 9, fill: color(i) });
    return {
      series: COUNTER_VIEWS.flatMap((v, i) => [
        line(`${v} total |drift|`, 2 * i, { points: point(2 * i) }),
        line(`${v} ${v === "like_count" ? "items" : "posts"} drifted`, 2 * i + 1, { points: point(2 * i + 1), dash: [6, 4] }),
      ]),
      axes: [{ label: "|drift|" }],
      // Runs are rare: show at least an hour around them. (uPlot alone widens one point to years.)
      scales: {
        x: {
          time: true,
          range: (u, min, max) => {
            const xs = u.data[0];
            if (xs.length === 0) return [min, max];
            const first = xs[0];
            const last = xs[xs.length - 1];
            return last - first >= 3600 ? [first, last] : [(first + last) / 2 - 1800, (first + last) / 2 + 1800];
          },
        },
      },
    };
  }

  function setPlotData(plot, data) {
    plot.uplot.setData(data);
    let points = 0;
    for (let i = 1; i < data.length; i++) points += data[i].filter((v) => v !== null && v !== undefined).length;
    $(plot.id).dataset.points = String(points);
  }

  function render() {
    const now = latest.now;
    samples = samples.filter((s) => s.t > now - HISTORY_MS);
    if (!plots) {
      plots = Object.entries(plotSpecs(latest.partitions)).map(([id, spec]) => makePlot(id, spec));
      plots.push(makePlot("plot-drift", driftSpec()));
      const resize = new ResizeObserver(() => {
        for (const p of plots) p.uplot.setSize({ width: Math.max(200, p.chart.clientWidth), height: 220 });
      });
      for (const p of plots) resize.observe(p.chart);
    }
    $("panels").dataset.samples = String(samples.length);
    const xs = samples.map((s) => s.t / 1000);
    for (const plot of plots) {
      if (plot.id === "plot-drift") {
        setPlotData(plot, driftData());
      } else {
        setPlotData(plot, [xs, ...plot.spec.values.map((value) => samples.map(value))]);
      }
    }
    renderStatus();
    renderTables();
  }

  /** One x per run time of any counter; each counter's two series are null where another counter ran. */
  function driftData() {
    const xs = [...new Set(COUNTER_VIEWS.flatMap((v) => latest.drift[v].map((r) => r.at / 1000)))].sort((a, b) => a - b);
    const series = COUNTER_VIEWS.flatMap((v) => {
      const byX = new Map(latest.drift[v].map((r) => [r.at / 1000, r]));
      return [xs.map((x) => byX.get(x)?.totalAbsDrift ?? null), xs.map((x) => byX.get(x)?.itemsDrifted ?? null)];
    });
    return [xs, ...series];
  }

  function renderStatus() {
    const { status } = latest;
    const header = $("status");
    header.dataset.state = status.state;
    $("status-text").textContent = status.state === "ok" ? "All clear" : `ALARM (${status.reasons.length})`;
    $("updated").textContent = `updated ${new Date(latest.now).toLocaleTimeString()}`;
    const list = $("reasons");
    list.replaceChildren(...status.reasons.map((r) => {
      const li = document.createElement("li");
      li.textContent = r;
      return li;
    }));
  }

  function row(cells, lagging = false) {
    const tr = document.createElement("tr");
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = String(c);
      if (lagging && i === cells.length - 1) td.className = "lagging";
      tr.append(td);
    });
    return tr;
  }

  function renderTables() {
    $("watermarks").tBodies[0].replaceChildren(...latest.watermarks.map((w) => row([w.view, w.part, w.appliedUpto, w.lag], w.lag > 0)));
    $("consumers").tBodies[0].replaceChildren(...latest.consumers.map((c) => row([c.name, c.failedInARow], c.failedInARow > 0)));
    const audit = $("audit");
    if (latest.audit) {
      audit.dataset.clean = String(latest.audit.clean);
      audit.textContent = `${latest.audit.clean ? "clean" : "VIOLATIONS"} at ${new Date(latest.audit.at).toLocaleString()} (${latest.audit.source})`;
    }
    // Per counter with runs: like counts first (their line is what an operator looks for most).
    const lastRuns = COUNTER_VIEWS.flatMap((v) => {
      const last = latest.drift[v][latest.drift[v].length - 1];
      if (!last) return [];
      const what = v === "like_count" ? "items" : "posts";
      return [`${v} run ${last.runId} at ${new Date(last.at).toLocaleString()}: ${last.itemsChecked} ${what} checked, ` +
        `${last.itemsDrifted} drifted, total |drift| ${last.totalAbsDrift}`];
    });
    if (lastRuns.length > 0) $("rebuild").textContent = lastRuns.join("; ");
    $("cache").dataset.configured = String(latest.cache.configured);
    if (latest.cache.configured) $("cache-state").textContent = `Redis count layer: ${latest.cache.state}${latest.cache.state === "degraded" ? " (counts are read from PostgreSQL until Redis answers)" : ""}`;
  }

  async function api(path) {
    return fetch(path, { headers: { authorization: `Bearer ${token}` }, cache: "no-store" });
  }

  function signOut(message) {
    token = null;
    clearTimeout(pollTimer);
    $("login-error").textContent = message;
    $("login").hidden = false;
    $("status").dataset.state = "signed-out";
    $("status-text").textContent = "Sign in with an admin token";
  }

  /** Polls one after the other (the timer and the audit button both ask), so no sample arrives twice. */
  let queue = Promise.resolve();
  function poll() {
    const next = queue.then(pollOnce);
    queue = next.catch(() => undefined); // a failed poll (reported by its caller) does not stop the next
    return next;
  }

  async function pollOnce() {
    if (token === null) return;
    const since = samples.length > 0 ? samples[samples.length - 1].t : 0;
    let response;
    try {
      response = await api(`/v1/admin/dashboard?since=${since}`);
    } catch {
      $("status").dataset.state = "unknown";
      $("status-text").textContent = "The service does not answer";
      return schedule(MIN_POLL_MS * 5);
    }
    if (response.status === 401 || response.status === 403) {
      const body = await response.json();
      return signOut(`${response.status}: ${body.error.message}`);
    }
    if (!response.ok) {
      $("status").dataset.state = "unknown";
      $("status-text").textContent = `The service answered ${response.status}`;
      return schedule(MIN_POLL_MS * 5);
    }
    latest = await response.json();
    samples.push(...latest.samples);
    $("login").hidden = true;
    $("panels").hidden = false;
    render();
    schedule(Math.max(MIN_POLL_MS, latest.sampleMs));
  }

  function schedule(ms) {
    clearTimeout(pollTimer);
    if (token !== null) pollTimer = setTimeout(poll, ms);
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $("token");
    token = input.value.trim();
    input.value = "";
    $("login-error").textContent = "";
    void poll();
  });

  $("run-audit").addEventListener("click", async () => {
    const button = $("run-audit");
    button.disabled = true;
    try {
      await api("/v1/admin/audit");
      await poll();
    } finally {
      button.disabled = false;
    }
  });
})();
