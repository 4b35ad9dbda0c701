/**
 * What the shipped Prometheus rules and the Grafana dashboard read (deploy/): the metric selectors
 * of their PromQL, and a /metrics scrape parsed into families, so a test can check that every name
 * and every label value a query asks for is one the service exports.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { parse } from "yaml";
import { REPO_ROOT } from "../cli/cli-child.ts";

export const PROMETHEUS_DIR = path.join(REPO_ROOT, "deploy", "prometheus");
export const GRAFANA_DASHBOARD = path.join(REPO_ROOT, "deploy", "grafana", "social-ledger.json");

/** Debian's promtool (`apt-get install prometheus`, which .ci/run does when it is missing). */
export const PROMTOOL =
  process.env.PROMTOOL_BIN ?? (existsSync("/usr/bin/promtool") ? "/usr/bin/promtool" : "promtool");

export interface PromtoolRun {
  code: number | null;
  output: string;
}

/** Runs promtool in `cwd`; a missing binary fails with how to install it, never a skip. */
export function promtool(args: readonly string[], cwd: string): PromtoolRun {
  const r = spawnSync(PROMTOOL, args, { cwd, encoding: "utf8", timeout: 60_000 });
  if (r.error)
    throw new Error(
      `${PROMTOOL} ${args.join(" ")}: ${r.error.message}; install it with: apt-get install -y prometheus`,
    );
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

export interface Rule {
  record?: string;
  alert?: string;
  expr: string;
}

export async function loadRules(file = path.join(PROMETHEUS_DIR, "rules.yml")): Promise<Rule[]> {
  const doc = parse(await readFile(file, "utf8")) as { groups: { rules: Rule[] }[] };
  return doc.groups.flatMap((g) => g.rules);
}

export interface Selector {
  name: string;
  /** The equality matchers (label="value"); regex and negative matchers are not checked. */
  equals: Record<string, string>;
}

const KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
]);

/**
 * The metric selectors of an expression. Grouping label lists, ranges (with Grafana's
 * `$__rate_interval`), offsets and string arguments are taken out first; what is left of the
 * identifiers is function names (followed by a parenthesis), keywords, and metric names.
 */
export function selectors(expr: string): Selector[] {
  const s = expr
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\boffset\s+\S+/g, " ");
  const found: Selector[] = [];
  const re = /"(?:[^"\\]|\\.)*"|([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?/g;
  for (const m of s.matchAll(re)) {
    const [, name, matchers, call] = m;
    if (!name || call || KEYWORDS.has(name)) continue;
    const equals: Record<string, string> = {};
    for (const [, label, value] of (matchers ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"/g))
      equals[label!] = value!;
    found.push({ name, equals });
  }
  return found;
}

export interface Sample {
  name: string;
  labels: Record<string, string>;
}

/** A text-format scrape: each family's type, and every sample's name and labels. */
export interface Scrape {
  types: Map<string, string>;
  samples: Sample[];
}

export function parseScrape(text: string): Scrape {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/.exec(line);
    if (!sample) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (sample[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    samples.push({ name: sample[1]!, labels });
  }
  return { types, samples };
}

/**
 * Why a selector names nothing the scrapes export, or undefined when it does: its family (a
 * histogram's _bucket, _sum and _count belong to it) must be in one of the scrapes, and when it
 * has equality matchers, one exported sample must carry every one of them.
 */
export function missing(selector: Selector, scrapes: readonly Scrape[]): string | undefined {
  const family = (s: Scrape) => {
    if (s.types.has(selector.name)) return true;
    const base = selector.name.replace(/_(bucket|sum|count)$/, "");
    return base !== selector.name && s.types.get(base) === "histogram";
  };
  const exporting = scrapes.filter(family);
  if (exporting.length === 0) return `${selector.name} is not on /metrics`;
  const wanted = Object.entries(selector.equals);
  if (wanted.length === 0) return undefined;
  const carried = exporting.some((s) =>
    s.samples.some((x) => x.name === selector.name && wanted.every(([k, v]) => x.labels[k] === v)),
  );
  return carried ? undefined : `no ${selector.name} sample has ${wanted.map(([k, v]) => `${k}="${v}"`).join(",")}`;
}

export interface Panel {
  title?: string;
  type?: string;
  targets?: { expr?: string; refId?: string }[];
  panels?: Panel[];
}

/** Every panel of the dashboard (rows' nested panels too) with its queries. */
export async function dashboardPanels(file = GRAFANA_DASHBOARD): Promise<Panel[]> {
  const doc = JSON.parse(await readFile(file, "utf8")) as { panels: Panel[] };
  const flat = (ps: readonly Panel[]): Panel[] => ps.flatMap((p) => [p, ...flat(p.panels ?? [])]);
  return flat(doc.panels);
}
