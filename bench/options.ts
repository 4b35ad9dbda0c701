/** The bench's command line (sizes and flags) and the shape of its workload: users, items, the like/unlike toggle. */
import { parseArgs } from "node:util";
import { MAX_PARTITIONS } from "../src/db/ledger-config.ts";

export const USAGE = `usage: node --import tsx bench/run.ts [options]

  --partitions P[,P...]   partition count of the benchmark database (default 1); a list
                          runs each setting on its own database of the same cluster
  --compare-partitions    also run P=4 (or P=1 when --partitions is 4) side by side, each on
                          its own database of the same cluster, phase by phase
  --workers N             concurrent library workers (default 16)
  --connections C         HTTP client connections (default 16)
  --quick                 the short run, smaller counts (about 4 minutes for one P on 2 cores,
                          and 2 more for the reduced concurrency sweep)
  --chunk-seconds s       seconds of each of the 4 chunks of every row of the alternating
                          write phase (default 2.5, 1 with --quick: at least 3 s per row)
  --ops n                 library operations of the warm-up, follow and lag phases
  --requests n            HTTP requests of the warm-up and the other HTTP phases
  --reads n               count reads per path and phase
  --sweep-only            only the concurrency sweep (bench/sweep.ts): likes and follows at
                          16/64/256/1024 callers, library and HTTP, P=1 and the default P,
                          next to pgbench at 16/64/128 clients (16/256 callers and 16/64
                          clients with --quick)
  --no-sweep              everything but the concurrency sweep
  --sweep-consumers-off   the sweep's writes run with the consumer loops stopped (each level
                          drains afterwards, untimed): what the consumers cost the writers
  --skip-replica          no streaming-replica phase (it makes a hot standby of the cluster)
  --history n             also the retention figure (bench/retention.ts): after n like events,
                          write rate, count read p99 and table sizes with the history kept and
                          pruned (issue 8 asks for 1000000); default 0 (skipped), 20000 with --quick
  --scale N               instead of the figures above, the scale bench (bench/scale.ts, issue 22)
                          at N likes and N/10, with its defaults: npm run bench:scale has its options
  -h, --help              this text
`;

export const SIZES = {
  // pgbenchSeconds: -T of each pgbench variant (bench/pgbench.ts); at least 3 s, also in the quick run.
  // chunkSeconds: each write row of the alternating phase runs WRITE_CHUNKS chunks of this long.
  default: {
    ops: 6000,
    requests: 4000,
    reads: 3000,
    warmupOps: 1500,
    warmupRequests: 800,
    pgbenchSeconds: 5,
    chunkSeconds: 2.5,
  },
  // p99 of a read phase is its 1 % tail: 2000 reads leave 20 samples above it.
  quick: {
    ops: 1200,
    requests: 800,
    reads: 2000,
    warmupOps: 500,
    warmupRequests: 200,
    pgbenchSeconds: 3,
    chunkSeconds: 1,
  },
};

/** Users per path (library users and HTTP users are distinct), items of the mixed variant. */
export const USERS = 1000;
export const ITEMS = 101;
export const HOT_ITEM = "hot-item";
export const BENCH_APPLICATION = "social-ledger-bench";
/** Chunks per kind of the alternating write phase. */
export const WRITE_CHUNKS = 4;
export const libUser = (n: number) => `lu${n}`;
export const httpUser = (n: number) => `hu${n}`;
export const item = (n: number) => `item-${n}`;

function positiveInt(name: string, raw: string | undefined, fallback: number, max = 10_000_000): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    process.stderr.write(`--${name} must be an integer in 1..${max}, got ${JSON.stringify(raw)}\n\n${USAGE}`);
    process.exit(2);
  }
  return n;
}

function positiveSeconds(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const s = Number(raw);
  if (!Number.isFinite(s) || s < 0.25 || s > 3600) {
    process.stderr.write(`--${name} must be a number of seconds in 0.25..3600, got ${JSON.stringify(raw)}\n\n${USAGE}`);
    process.exit(2);
  }
  return s;
}

export function parseOptions() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        partitions: { type: "string" },
        "compare-partitions": { type: "boolean", default: false },
        workers: { type: "string" },
        connections: { type: "string" },
        quick: { type: "boolean", default: false },
        "chunk-seconds": { type: "string" },
        ops: { type: "string" },
        requests: { type: "string" },
        reads: { type: "string" },
        "skip-replica": { type: "boolean", default: false },
        "sweep-only": { type: "boolean", default: false },
        "no-sweep": { type: "boolean", default: false },
        "sweep-consumers-off": { type: "boolean", default: false },
        history: { type: "string" },
        scale: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      allowPositionals: false,
    }).values;
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    process.exit(2);
  }
  if (parsed.help) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  const size = parsed.quick ? SIZES.quick : SIZES.default;
  // A list ("1,4,16") runs each setting on its own database of the one cluster, side by side.
  const list = [
    ...new Set((parsed.partitions ?? "1").split(",").map((p) => positiveInt("partitions", p, 1, MAX_PARTITIONS))),
  ];
  const partitions = list.length === 1 && parsed["compare-partitions"] ? [list[0]!, list[0] === 4 ? 1 : 4] : list;
  return {
    partitions,
    workers: positiveInt("workers", parsed.workers, 16, 256),
    connections: positiveInt("connections", parsed.connections, 16, 256),
    quick: parsed.quick,
    ops: positiveInt("ops", parsed.ops, size.ops),
    requests: positiveInt("requests", parsed.requests, size.requests),
    reads: positiveInt("reads", parsed.reads, size.reads),
    skipReplica: parsed["skip-replica"],
    sweep: parsed["sweep-only"] ? ("only" as const) : parsed["no-sweep"] ? ("off" as const) : ("on" as const),
    sweepConsumers: !parsed["sweep-consumers-off"],
    // The retention figure: skipped unless asked for, a small history in the quick run.
    // The scale bench's size, or 0: the figures of this bench.
    scale: parsed.scale === undefined ? 0 : positiveInt("scale", parsed.scale, 0, 100_000_000),
    history:
      parsed.history === "0"
        ? 0
        : parsed.history !== undefined
          ? positiveInt("history", parsed.history, 0, 100_000_000)
          : parsed.quick
            ? 20_000
            : 0,
    warmupOps: size.warmupOps,
    warmupRequests: size.warmupRequests,
    pgbenchSeconds: size.pgbenchSeconds,
    chunkSeconds: positiveSeconds("chunk-seconds", parsed["chunk-seconds"], size.chunkSeconds),
  };
}

/**
 * Operation k of a run of `ops` toggles pair j = k mod cycle, cycle = min(users, ops/2): the
 * first pass over the pairs likes, the next unlikes, and so on, so a run is half likes, half
 * unlikes, and two operations on one pair are a whole cycle apart (far more than are in
 * flight): nearly every operation is CHANGED, the expensive path that writes an event. Pair j
 * is user j with item j mod 101 (mixed) or the hot item, so both variants insert and update
 * the same number of fact rows and differ only in how many items they touch.
 */
export function toggle(k: number, ops: number, users: number): { j: number; like: boolean } {
  const cycle = Math.min(users, Math.max(64, Math.ceil(ops / 2)));
  return { j: k % cycle, like: Math.floor(k / cycle) % 2 === 0 };
}

export type Opts = ReturnType<typeof parseOptions>;
