/**
 * The top entries of V8 CPU profiles (.cpuprofile, from bench/http-cpu.ts --profile or
 * node --cpu-prof), summed over the files given: self time by function and by where the code
 * lives (a package, a file of src/, node's own internals), as shares of the busy samples (all
 * but "(idle)": how much of idle a thread shows depends on the machine's load, not on the code).
 *
 *   node --import tsx bench/cpu-profile-top.ts [--top n] FILE...
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

const { values, positionals } = parseArgs({ options: { top: { type: "string", default: "25" } }, allowPositionals: true });
const top = Number(values.top);

/** Where a frame's code lives: the package under node_modules, the project file, node's internals, or the VM's own entries. */
function area(url: string, name: string): string {
  if (url === "") return name.startsWith("(") ? name : "(native)";
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith("node:")) return url.replace(/^node:internal\//, "node:").split("/").slice(0, 2).join("/");
  const own = /\/((?:src|bench)\/.*)$/.exec(url);
  return own ? own[1]! : url;
}

const byFunction = new Map<string, number>();
const byArea = new Map<string, number>();
let total = 0;
let idle = 0;
for (const file of positionals) {
  const profile = JSON.parse(readFileSync(file, "utf8")) as { nodes: ProfileNode[]; samples: number[] };
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  for (const id of profile.samples) {
    const frame = nodes.get(id)!.callFrame;
    const where = area(frame.url, frame.functionName);
    if (where === "(idle)") {
      idle++;
      continue;
    }
    const fn = `${frame.functionName || "(anonymous)"} ${where}${frame.url ? `:${frame.lineNumber + 1}` : ""}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + 1);
    byArea.set(where, (byArea.get(where) ?? 0) + 1);
    total++;
  }
}
const print = (title: string, map: Map<string, number>) => {
  process.stdout.write(`${title} (${total} busy samples; ${idle} idle)\n`);
  for (const [key, n] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) process.stdout.write(`${((100 * n) / total).toFixed(1).padStart(6)} %  ${key}\n`);
};
print("self time by where the code lives", byArea);
print("\nself time by function", byFunction);
