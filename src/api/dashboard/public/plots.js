// The dashboard's uPlot plots: their series, one time window shared by all of them (ending at
// the service's "now"), time ticks that always give at least two labels, y ranges that stay
// small when a series is empty or flat, and a "no data yet" note over an empty plot.

const VIEWS = ["like_count", "follower_projection", "comment_count"];
/** The views that are counters, with rebuild runs and their drift. */
const COUNTER_VIEWS = ["like_count", "comment_count"];
const ROUTE_GROUPS = ["likes", "relations", "posts", "comments", "admin", "health", "other"];
const OUTCOMES = ["CHANGED", "NOOP", "REJECTED"];
/** Counter kinds of the Redis count layer (rates.countCache is keyed by them). */
const COUNT_KINDS = ["likes", "followers", "comments"];
/**
 * Saturated colours only: grid, axes and background are grey or white, so a drawn series is the
 * only colour on a canvas (the browser test counts those pixels). Red is left out: it means alarm.
 */
const PALETTE = ["#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#17becf", "#e377c2", "#8c564b", "#bcbd22", "#0b3d91"];
/** A view has the same colour in every plot. */
const VIEW_COLOR = { like_count: PALETTE[0], follower_projection: PALETTE[1], comment_count: PALETTE[2] };

export const CHART_HEIGHT = 165;
/** The shortest window: a page opened just after the start still has a readable time axis. */
const MIN_WINDOW_S = 30;
/** Tick steps of the time axis, in seconds. */
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
/** Room for one "13:52:30" label. */
const TIME_LABEL_PX = 64;
const clock = uPlot.fmtDate("{HH}:{mm}:{ss}");
const clockMinutes = uPlot.fmtDate("{HH}:{mm}");

function color(i) {
  return PALETTE[i % PALETTE.length];
}

function line(label, stroke, extra = {}) {
  return { label, stroke, width: 1.5, spanGaps: false, points: { show: false }, ...extra };
}

/** For figures that are null in an interval with nothing to measure (p99, hit rate): one line through the points there are. */
function sparseLine(label, stroke, extra = {}) {
  return line(label, stroke, { spanGaps: true, ...extra });
}

/** The smallest of 1, 2, 2.5, 5 times a power of ten that is at least x. */
function niceCeil(x) {
  const power = 10 ** Math.floor(Math.log10(x));
  return [1, 2, 2.5, 5, 10].map((m) => m * power).find((n) => n >= x);
}

/** A y range from 0 up, at least [0, floor]: uPlot alone draws an empty or all-zero series on 0-100. */
function fromZero(floor) {
  return (u, min, max) => {
    const top = Number.isFinite(max) && max > 0 ? niceCeil(max * 1.1) : floor;
    return [Number.isFinite(min) && min < 0 ? min : 0, Math.max(floor, top)];
  };
}

const PERCENT = { range: [0, 100] };

/** Ticks at whole multiples of a step that leaves room for every label, and never fewer than two. */
function timeSplits(u, axisIdx, min, max) {
  const span = max - min;
  const room = Math.max(2, Math.floor(u.bbox.width / uPlot.pxRatio / TIME_LABEL_PX));
  const fits = TIME_STEPS.find((s) => span / s <= room) ?? TIME_STEPS[TIME_STEPS.length - 1];
  const step = fits <= span / 2 ? fits : ([...TIME_STEPS].reverse().find((s) => s <= span / 2) ?? TIME_STEPS[0]);
  const ticks = [];
  for (let t = Math.ceil(min / step) * step; t <= max; t += step) ticks.push(t);
  return ticks;
}

function timeLabels(u, splits) {
  const step = splits.length > 1 ? splits[1] - splits[0] : 1;
  return splits.map((t) => (step < 60 ? clock : clockMinutes)(new Date(t * 1000)));
}

/** The plots fed from the samples: each one its series, its y axes and how a sample becomes a point. */
function sampleSpecs() {
  const lagSeries = [];
  const lagValues = [];
  for (const view of VIEWS) {
    lagSeries.push(line(view, VIEW_COLOR[view], { width: 2 }));
    lagValues.push((s) => (s.views ? s.views[view].lag.reduce((a, b) => a + b, 0) : null));
    lagSeries.push(line(`${view} worst`, VIEW_COLOR[view], { dash: [5, 3] }));
    lagValues.push((s) => (s.views ? Math.max(0, ...s.views[view].lag) : null));
  }
  const rate = (pick) => (s) => (s.rates ? pick(s.rates) : null);
  return {
    "plot-lag": {
      series: lagSeries,
      values: lagValues,
      axes: [{ label: "events" }],
      scales: { y: { range: fromZero(5) } },
    },
    "plot-consumers": {
      series: [
        ...VIEWS.map((v) => line(v, VIEW_COLOR[v])),
        ...VIEWS.map((v) => line(`${v} failed`, VIEW_COLOR[v], { scale: "failures", dash: [5, 3] })),
      ],
      values: [
        ...VIEWS.map((v) => rate((r) => r.consumers[v].appliedPerSec)),
        ...VIEWS.map((v) => rate((r) => r.consumers[v].failuresPerSec)),
      ],
      axes: [{ label: "events/s" }, { label: "failed passes/s", scale: "failures" }],
      scales: { y: { range: fromZero(1) }, failures: { range: fromZero(1) } },
    },
    "plot-outcomes": {
      series: [
        ...OUTCOMES.map((o, i) => line(`${o}/s`, color(i))),
        line("unique inserts %", color(OUTCOMES.length), { scale: "percent", dash: [5, 3] }),
      ],
      values: [
        ...OUTCOMES.map((o) => rate((r) => r.outcomes[o])),
        rate((r) => (r.uniqueInsertRatio === null ? null : Math.round(r.uniqueInsertRatio * 1000) / 10)),
      ],
      axes: [{ label: "writes/s" }, { label: "unique inserts %", scale: "percent" }],
      scales: { y: { range: fromZero(1) }, percent: PERCENT },
    },
    "plot-requests": {
      series: ROUTE_GROUPS.map((g, i) => line(g, color(i))),
      values: ROUTE_GROUPS.map((g) => rate((r) => r.requests[g].perSec)),
      axes: [{ label: "requests/s" }],
      scales: { y: { range: fromZero(1) } },
    },
    "plot-latency": {
      series: ROUTE_GROUPS.map((g, i) => sparseLine(g, color(i))),
      values: ROUTE_GROUPS.map((g) => rate((r) => r.requests[g].p99Ms)),
      axes: [{ label: "ms" }],
      scales: { y: { range: fromZero(10) } },
    },
    "plot-cache": {
      series: [
        ...COUNT_KINDS.map((k, i) => sparseLine(`${k} hit %`, color(i), { scale: "percent" })),
        line("lookups/s", color(COUNT_KINDS.length), { scale: "rate", dash: [5, 3] }),
        line("fallbacks/s", color(COUNT_KINDS.length + 1), { scale: "rate", dash: [2, 3] }),
      ],
      values: [
        ...COUNT_KINDS.map((k) =>
          rate((r) => {
            const c = r.countCache ? r.countCache[k] : undefined;
            return c && c.hitRatio !== null ? Math.round(c.hitRatio * 1000) / 10 : null;
          }),
        ),
        rate((r) => cacheSum(r, "lookupsPerSec")),
        rate((r) => cacheSum(r, "fallbacksPerSec")),
      ],
      axes: [
        { label: "hit %", scale: "percent" },
        { label: "per second", scale: "rate" },
      ],
      scales: { percent: PERCENT, rate: { range: fromZero(1) } },
    },
  };
}

/** A figure of the count cache summed over the kinds; null when this process has no cache lookups at all. */
function cacheSum(rates, field) {
  const kinds = Object.values(rates.countCache || {});
  return kinds.length === 0 ? null : kinds.reduce((sum, k) => sum + k[field], 0);
}

/** Rebuild runs are events, not a rate: a point per run, joined per counter. */
function driftSpec() {
  const point = (stroke) => ({ show: true, size: 8, fill: stroke });
  return {
    series: COUNTER_VIEWS.flatMap((v, i) => [
      sparseLine(`${v} |drift|`, color(2 * i), { points: point(color(2 * i)) }),
      sparseLine(`${v} ${v === "like_count" ? "items" : "posts"} drifted`, color(2 * i + 1), {
        points: point(color(2 * i + 1)),
        dash: [5, 3],
      }),
    ]),
    axes: [{ label: "|drift|" }],
    scales: { y: { range: fromZero(5) } },
  };
}

/** One x per run time of any counter inside the window; each counter's two series are null where another counter ran. */
function driftData(drift, [start, end]) {
  const inWindow = (r) => r.at / 1000 >= start && r.at / 1000 <= end;
  const xs = [...new Set(COUNTER_VIEWS.flatMap((v) => drift[v].filter(inWindow).map((r) => r.at / 1000)))].sort(
    (a, b) => a - b,
  );
  const series = COUNTER_VIEWS.flatMap((v) => {
    const byX = new Map(drift[v].map((r) => [r.at / 1000, r]));
    return [xs.map((x) => byX.get(x)?.totalAbsDrift ?? null), xs.map((x) => byX.get(x)?.itemsDrifted ?? null)];
  });
  return [xs, ...series];
}

/**
 * Every plot of the page. `window` holds the shared time window that each plot's x range reads,
 * so all of them show the same minutes; update() moves it and redraws.
 */
export function createPlots() {
  const shared = { window: [Date.now() / 1000 - MIN_WINDOW_S, Date.now() / 1000] };
  const specs = { ...sampleSpecs(), "plot-drift": driftSpec() };
  const plots = Object.entries(specs).map(([id, spec]) => makePlot(id, spec, shared));
  const resize = new ResizeObserver(() => {
    for (const p of plots) p.uplot.setSize({ width: Math.max(200, p.chart.clientWidth), height: CHART_HEIGHT });
  });
  for (const p of plots) resize.observe(p.chart);
  // For the browser test and an operator's console: the uPlot instances by panel id (read them, do not change them).
  window.dashboardPlots = Object.fromEntries(plots.map((p) => [p.id, p.uplot]));

  return {
    /** Redraws every plot over [now - span, now], span being the history held (one minute at least, one hour at most). */
    update(samples, latest, historyMs) {
      const end = latest.now / 1000;
      const oldest = samples.length > 0 ? samples[0].t / 1000 : end;
      shared.window = [end - Math.min(historyMs / 1000, Math.max(MIN_WINDOW_S, end - oldest)), end];
      const xs = samples.map((s) => s.t / 1000);
      for (const plot of plots) {
        const data =
          plot.id === "plot-drift"
            ? driftData(latest.drift, shared.window)
            : [xs, ...plot.spec.values.map((value) => samples.map(value))];
        setPlotData(plot, data);
      }
    },
  };
}

function makePlot(id, spec, shared) {
  const section = document.getElementById(id);
  const chart = section.querySelector(".chart");
  const axes = [{ splits: timeSplits, values: timeLabels, space: TIME_LABEL_PX }];
  spec.axes.forEach((a, i) => {
    axes.push({
      scale: a.scale ?? "y",
      label: a.label,
      side: i === 0 ? 3 : 1,
      grid: { show: i === 0 },
      size: 50,
      labelSize: 20,
    });
  });
  const opts = {
    width: Math.max(200, chart.clientWidth),
    height: CHART_HEIGHT,
    series: [{}, ...spec.series],
    axes,
    scales: { ...spec.scales, x: { time: true, range: () => shared.window } },
    // Room for half of the last time label where no right axis gives it.
    padding: [8, spec.axes.length > 1 ? 0 : 28, 0, 0],
    legend: { live: false },
    cursor: { drag: { x: false, y: false } },
  };
  const empty = document.createElement("p");
  empty.className = "no-data";
  chart.append(empty);
  return { id, spec, chart, section, empty, uplot: new uPlot(opts, [[], ...spec.series.map(() => [])], chart) };
}

function setPlotData(plot, data) {
  plot.uplot.setData(data);
  let points = 0;
  for (let i = 1; i < data.length; i++) points += data[i].filter((v) => v !== null && v !== undefined).length;
  plot.section.dataset.points = String(points);
  plot.empty.textContent = points > 0 ? "" : plot.id === "plot-drift" ? "no rebuild run in this window" : "no data yet";
}
