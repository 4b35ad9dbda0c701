// The operator dashboard: asks for an admin token (kept in this closure only, never stored),
// polls GET /v1/admin/dashboard for the samples it has not seen, and shows them: the plots
// (plots.js) and the state of the moment (state.js). docs/dashboard.md describes the endpoint
// and the alarms.
import { createPlots } from "./plots.js";
import { renderStatus, renderTables } from "./state.js";

const HISTORY_MS = 60 * 60 * 1000;
const MIN_POLL_MS = 1000;

const $ = (id) => document.getElementById(id);
let token = null;
let samples = [];
let latest = null;
let plots = null;
let pollTimer = null;

function render() {
  samples = samples.filter((s) => s.t > latest.now - HISTORY_MS);
  plots ??= createPlots();
  $("panels").dataset.samples = String(samples.length);
  plots.update(samples, latest, HISTORY_MS);
  renderStatus(latest);
  renderTables(latest);
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
