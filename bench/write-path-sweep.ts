/**
 * `npm run bench:write-path -- --before DIR`: like CHANGED/s, p50 and p99 of the library's like
 * write at 16, 64 and 256 callers, at P = 1 and P = 16, for two trees side by side in one run on
 * one cluster: DIR (a checkout of the code to compare against, with node_modules) and this tree.
 * Each tree migrates its own databases with its own migrations and writes through its own
 * LikeService (a pool of 20, as `serve` uses); each cell is four rounds in ABBA order, summed.
 * Options: --before DIR (required), --seconds S per round (default 3), --callers 16,64,256,
 * --partitions 1,16, --after-in-flight K (this tree's batches in flight, default its own default),
 * --with-consumers (each tree writes through its own ledger with its own consumer loops,
 * createWorkers with serve's defaults, running during its rounds only: what the loops cost the
 * writers). Each cell also prints the whole machine's CPU per like (bench/machine-cpu.ts).
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { BenchCluster } from "./bench-cluster.ts";
import { mergeFigures, runForSeconds, type Figures } from "./load.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { machineCpu, machineCpuSince } from "./machine-cpu.ts";

interface Writer {
  like(user: string, item: string): Promise<{ outcome: string }>;
  unlike(user: string, item: string): Promise<{ outcome: string }>;
  createItem(item: string): Promise<void>;
}

interface Loop {
  start(): void;
  stop(): Promise<void>;
}

interface Tree {
  name: string;
  migrate: (pool: Pool) => Promise<unknown>;
  initLedger: (pool: Pool, o: { partitions: number }) => Promise<unknown>;
  open: (pool: Pool, options: object) => Promise<Writer>;
  /** The tree's ledger's like writer and its consumer loops (not started). */
  openWithLoops: (pool: Pool) => Promise<{ writer: Writer; loops: Loop[] }>;
}

const ITEMS = 20;

async function loadTree(name: string, dir: string): Promise<Tree> {
  const mod = (p: string) => import(path.join(dir, p));
  const migrate = await mod("src/db/migrate.ts");
  const config = await mod("src/db/ledger-config.ts");
  const likes = await mod("src/likes/like-service.ts");
  const ledgers = await mod("src/ledger.ts");
  return {
    name,
    migrate: migrate.migrate,
    initLedger: config.initLedger,
    open: (pool, options) => likes.LikeService.open(pool, options),
    openWithLoops: async (pool) => {
      const ledger = await ledgers.openLedger(pool);
      return { writer: ledger.likes, loops: ledgers.createWorkers(ledger) };
    },
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      before: { type: "string" },
      seconds: { type: "string", default: "3" },
      callers: { type: "string", default: "16,64,256" },
      partitions: { type: "string", default: "1,16" },
      "after-in-flight": { type: "string" },
      "with-consumers": { type: "boolean", default: false },
    },
  });
  if (!values.before) throw new Error("--before DIR is required (a checkout with node_modules)");
  const seconds = Number(values.seconds);
  const callerCounts = values.callers.split(",").map(Number);
  const partitionCounts = values.partitions.split(",").map(Number);
  const here = path.resolve(fileURLToPath(new URL("..", import.meta.url)));
  const trees = [await loadTree("before", path.resolve(values.before)), await loadTree("after", here)];
  const bench = await BenchCluster.start("write-path-sweep-", { max_connections: "200" });
  try {
    const rows: string[] = [];
    for (const partitions of partitionCounts) {
      const writers: Writer[] = [];
      const loops: Loop[][] = [];
      for (const tree of trees) {
        const name = `${tree.name}_p${partitions}`;
        const admin = createPool({ connectionString: bench.cluster.connectionString("postgres"), max: 1 });
        await admin.query(`CREATE DATABASE ${name}`);
        await admin.end();
        const pool = bench.pool(name, 20);
        await tree.migrate(pool);
        await tree.initLedger(pool, { partitions });
        const inFlight = values["after-in-flight"];
        if (values["with-consumers"]) {
          const opened = await tree.openWithLoops(pool);
          writers.push(opened.writer);
          loops.push(opened.loops);
        } else {
          writers.push(
            await tree.open(pool, tree.name === "after" && inFlight ? { batchesInFlight: Number(inFlight) } : {}),
          );
          loops.push([]);
        }
        for (let i = 0; i < ITEMS; i++) await writers.at(-1)!.createItem(`it-${i}`);
      }
      for (const callers of callerCounts) {
        const runs: Figures[][] = [[], []];
        const cpuMs = [0, 0];
        let round = 0;
        // ABBA: before, after, after, before.
        for (const which of [0, 1, 1, 0]) {
          const w = writers[which]!;
          const changed = { n: 0 };
          // Caller c toggles its own pairs (user u<round>-<c>, items in turn): every write a change.
          const prefix = `u${round++}-${callers}-`;
          for (const l of loops[which]!) l.start();
          const cpu = machineCpu();
          const figures = await runForSeconds(seconds, callers, async (k) => {
            const c = k % callers;
            const step = Math.floor(k / callers);
            const user = prefix + c;
            const item = `it-${Math.floor(step / 2) % ITEMS}`;
            const r = step % 2 === 0 ? await w.like(user, item) : await w.unlike(user, item);
            if (r.outcome === "CHANGED") changed.n++;
          });
          cpuMs[which]! += machineCpuSince(cpu)?.busyMs ?? NaN;
          await Promise.all(loops[which]!.map((l) => l.stop()));
          runs[which]!.push({ ...figures, ops: changed.n, opsPerSec: changed.n / figures.seconds });
        }
        const [before, after] = runs.map((r) => mergeFigures(r)) as [Figures, Figures];
        const cpuPerLike = (which: number, f: Figures) => ((cpuMs[which]! * 1000) / f.ops).toFixed(0).padStart(7);
        const line = [
          `P=${partitions}`.padEnd(5),
          String(callers).padStart(4),
          before.opsPerSec.toFixed(0).padStart(8),
          after.opsPerSec.toFixed(0).padStart(8),
          (after.opsPerSec / before.opsPerSec).toFixed(2).padStart(6),
          before.p50Ms.toFixed(1).padStart(7),
          after.p50Ms.toFixed(1).padStart(7),
          before.p99Ms.toFixed(1).padStart(7),
          after.p99Ms.toFixed(1).padStart(7),
          cpuPerLike(0, before),
          cpuPerLike(1, after),
          String(before.errors + after.errors).padStart(4),
        ].join(" ");
        rows.push(line);
        console.log(line);
      }
    }
    console.log(
      `\nlike CHANGED/s, library, pool of 20${values["with-consumers"] ? ", consumer loops running" : ""}; each cell 4 rounds of ` +
        `${seconds} s in ABBA order on one cluster (before: ${values.before}); µs: the machine's CPU per like\n` +
        "P     callers before   after  ratio p50 bef p50 aft p99 bef p99 aft µs bef µs aft errs\n" +
        rows.join("\n"),
    );
  } finally {
    await bench.stop();
  }
}

await main();
process.exit(0);
