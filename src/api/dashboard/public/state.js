// The dashboard's state of the moment: the header, one summary row per view (lag, its worst
// partition, the consumer loops, the state by the service's alarm rules), the per-partition and
// per-loop details on demand, the last audit and the last rebuild. Red means what the header's
// alarm rules mean, nothing less: lag alone (a burst being worked off) is not red.

const VIEWS = ["like_count", "follower_projection", "comment_count"];
const COUNTER_VIEWS = ["like_count", "comment_count"];
/** The consumer loop of each view, as createWorkers names them (`like-counter#g`). */
const LOOP_OF_VIEW = {
  like_count: "like-counter",
  follower_projection: "follower-projector",
  comment_count: "comment-counter",
};
const RULE_TEXT = { stalled: "watermark stalled", growing: "lag growing" };

const $ = (id) => document.getElementById(id);

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = String(text);
  if (className) td.className = className;
  return td;
}

function tr(...cells) {
  const row = document.createElement("tr");
  row.append(...cells);
  return row;
}

/** Partition numbers with runs written as ranges: "p3", "p0-p9, p12-p14". */
function partNames(parts) {
  const sorted = [...parts].sort((a, b) => a - b);
  const runs = [];
  for (const p of sorted) {
    const run = runs[runs.length - 1];
    if (run && p === run[1] + 1) run[1] = p;
    else runs.push([p, p]);
  }
  return runs.map(([first, last]) => (first === last ? `p${first}` : `p${first}-p${last}`)).join(", ");
}

export function renderStatus(latest) {
  const { status } = latest;
  $("status").dataset.state = status.state;
  $("status-text").textContent = status.state === "ok" ? "All clear" : `ALARM (${status.reasons.length})`;
  $("updated").textContent = `updated ${new Date(latest.now).toLocaleTimeString()}`;
  $("reasons").replaceChildren(
    ...status.reasons.map((r) => {
      const li = document.createElement("li");
      li.textContent = r;
      return li;
    }),
  );
}

/** One view's figures: its partitions' watermarks, the alarms on them and its loops in this process. */
function viewState(latest, view) {
  const marks = latest.watermarks.filter((w) => w.view === view);
  const rules = new Map(latest.status.partitions.filter((a) => a.view === view).map((a) => [a.part, a.rule]));
  const loops = latest.consumers.filter((c) => c.kind === view);
  const failing = loops.filter((c) => c.failedInARow >= latest.thresholds.consumerFailures);
  // The worst partition: an alarming one first, then the largest lag, then the lowest number.
  const worst = [...marks].sort(
    (a, b) => Number(rules.has(b.part)) - Number(rules.has(a.part)) || b.lag - a.lag || a.part - b.part,
  )[0];
  return { marks, rules, loops, failing, worst, lag: marks.reduce((n, w) => n + w.lag, 0) };
}

function summaryRow(latest, view) {
  const s = viewState(latest, view);
  const name = cell(view);
  name.title = `consumer loops: ${LOOP_OF_VIEW[view]}#g`;
  if (s.marks.length === 0)
    return tr(name, cell("–"), cell("–"), cell("–"), cell("–"), cell("no data: the database did not answer", "alarm"));
  const worst =
    s.worst.lag > 0 || s.rules.has(s.worst.part)
      ? cell(`p${s.worst.part}: lag ${s.worst.lag}`, s.rules.has(s.worst.part) ? "alarm" : "")
      : cell("none lagging", "quiet");
  const retrying = s.loops.filter((c) => c.failedInARow > 0).length;
  const loops =
    s.loops.length === 0
      ? cell("none here", "quiet")
      : cell(
          `${s.loops.length}${s.failing.length > 0 ? `, ${s.failing.length} failing` : retrying > 0 ? `, ${retrying} retrying` : ""}`,
          s.failing.length > 0 ? "alarm" : "",
        );
  const states = [];
  for (const rule of ["stalled", "growing"]) {
    const parts = [...s.rules].filter(([, r]) => r === rule).map(([p]) => p);
    if (parts.length > 0) states.push(`${RULE_TEXT[rule]}: ${partNames(parts)}`);
  }
  if (s.failing.length > 0) states.push(`${s.failing.length} loop${s.failing.length > 1 ? "s" : ""} failing`);
  const state =
    states.length > 0 ? cell(states.join("; "), "alarm") : s.lag > 0 ? cell("catching up") : cell("caught up", "ok");
  const row = tr(name, cell(s.lag), worst, cell(s.marks.reduce((n, w) => n + w.appliedUpto, 0)), loops, state);
  row.dataset.view = view;
  row.dataset.state = states.length > 0 ? "alarm" : s.lag > 0 ? "catching-up" : "ok";
  return row;
}

/** Per partition: one row, a watermark and a lag per view; red only where the alarm rules name the partition. */
function partitionRows(latest) {
  const partitions = Math.max(0, ...latest.watermarks.map((w) => w.part + 1));
  const byKey = new Map(latest.watermarks.map((w) => [`${w.view}/${w.part}`, w]));
  const rules = new Map(latest.status.partitions.map((a) => [`${a.view}/${a.part}`, a.rule]));
  return Array.from({ length: partitions }, (_, part) =>
    tr(
      cell(part),
      ...VIEWS.flatMap((view) => {
        const w = byKey.get(`${view}/${part}`);
        if (!w) return [cell("–"), cell("–")];
        const rule = rules.get(`${view}/${part}`);
        const lag = cell(w.lag, rule ? "alarm" : w.lag > 0 ? "" : "quiet");
        lag.dataset.view = view;
        if (rule) lag.title = RULE_TEXT[rule];
        return [cell(w.appliedUpto), lag];
      }),
    ),
  );
}

/** Per loop group g: the failed passes in a row of like-counter#g, follower-projector#g and comment-counter#g. */
function loopRows(latest) {
  const groups = [...new Set(latest.consumers.map((c) => c.name.split("#")[1] ?? c.name))];
  const byName = new Map(latest.consumers.map((c) => [c.name, c]));
  return groups.map((g) =>
    tr(
      cell(`#${g}`),
      ...VIEWS.map((view) => {
        const loop = byName.get(`${LOOP_OF_VIEW[view]}#${g}`);
        if (!loop) return cell("–");
        return cell(
          loop.failedInARow,
          loop.failedInARow >= latest.thresholds.consumerFailures ? "alarm" : loop.failedInARow > 0 ? "" : "quiet",
        );
      }),
    ),
  );
}

function headerOnce(table, rows) {
  if (table.tHead.rows.length > 0) return;
  table.tHead.append(
    ...rows.map((cells) => {
      const row = document.createElement("tr");
      for (const [text, span] of cells) {
        const th = document.createElement("th");
        th.textContent = text;
        if (span > 1) th.colSpan = span;
        row.append(th);
      }
      return row;
    }),
  );
}

export function renderTables(latest) {
  const { lagMs, consumerFailures } = latest.thresholds;
  $("alarm-rules").textContent =
    `red only by the alarm rules: a watermark standing still or lag growing for ${lagMs / 1000} s, a loop failing ${consumerFailures} passes in a row`;
  $("views").tBodies[0].replaceChildren(...VIEWS.map((v) => summaryRow(latest, v)));

  const partitions = $("watermarks");
  headerOnce(partitions, [
    [["", 1], ...VIEWS.map((v) => [v, 2])],
    [
      ["partition", 1],
      ...VIEWS.flatMap(() => [
        ["applied up to", 1],
        ["lag", 1],
      ]),
    ],
  ]);
  partitions.tBodies[0].replaceChildren(...partitionRows(latest));
  $("partition-count").textContent = `${partitions.tBodies[0].rows.length} partitions × ${VIEWS.length} views`;

  const loops = $("consumers");
  headerOnce(loops, [[["loop", 1], ...VIEWS.map((v) => [LOOP_OF_VIEW[v], 1])]]);
  loops.tBodies[0].replaceChildren(...loopRows(latest));
  $("loop-count").textContent =
    `${latest.consumers.length} loops, failed passes in a row (alarm at ${latest.thresholds.consumerFailures})`;

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
    const li = document.createElement("li");
    li.textContent =
      `${v} run ${last.runId} at ${new Date(last.at).toLocaleString()}: ${last.itemsChecked} ${what} checked, ` +
      `${last.itemsDrifted} drifted, total |drift| ${last.totalAbsDrift}`;
    return [li];
  });
  if (lastRuns.length > 0) $("rebuild").replaceChildren(...lastRuns);
  $("cache").dataset.configured = String(latest.cache.configured);
  if (latest.cache.configured) {
    const state = $("cache-state");
    state.textContent = `Redis count layer: ${latest.cache.state}${latest.cache.state === "degraded" ? " (counts are read from PostgreSQL until Redis answers)" : ""}`;
    state.className = latest.cache.state === "up" ? "ok" : "warn";
  }
}
