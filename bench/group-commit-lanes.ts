/**
 * `npm run bench:lanes`: group commit's lanes side by side (docs/write-path.md, "Group commit").
 * Per partition count, one database and one LikeService per variant on users of its own:
 * unbatched (LEDGER_WRITE_BATCH_MAX = 1), one lane per partition (K = 2 each), and L lanes
 * (partition p in lane p mod L, K = 1 when a lane holds more than one partition). The variants
 * take turns in timed chunks (the order rotating each round), 16 writers, the main bench's
 * like/unlike toggles (options.ts `toggle`), so a ratio compares the same minutes of a shared machine.
 *
 *   node --import tsx bench/group-commit-lanes.ts [--partitions 1,4,16] [--lanes 2,4,8] [--seconds 3] [--chunks 4]
 */
import os from "node:os";
import { parseArgs } from "node:util";
import type { Pool } from "../src/db/pool.ts";
import { LikeService } from "../src/likes/like-service.ts";
import { BenchCluster } from "./bench-cluster.ts";
import { percentile, runForSeconds } from "./load.ts";
import { ITEMS, USERS, item, toggle } from "./options.ts";

const { values } = parseArgs({ options: { partitions: { type: "string" }, lanes: { type: "string" }, seconds: { type: "string" }, chunks: { type: "string" } } });
const list = (raw: string | undefined, fallback: number[]) => (raw ? raw.split(",").map(Number) : fallback);
const PARTITIONS = list(values.partitions, [1, 4, 16]);
const LANES = list(values.lanes, [2, 4, 8]);
const SECONDS = Number(values.seconds ?? 3);
const CHUNKS = Number(values.chunks ?? 4);
const WORKERS = 16;
/** Toggle cycle of the main bench at its default size: 1,000 pairs, like pass then unlike pass. */
const CYCLE_OPS = 2 * USERS;

interface Variant {
  name: string;
  likes: LikeService;
  users: string;
  next: number;
  ops: number;
  changed: number;
  wal: number;
  seconds: number;
  errors: number;
  latencies: number[];
  /** CHANGED/s of each chunk, for the spread. */
  chunkRates: number[];
}

async function changedSoFar(pool: Pool): Promise<number> {
  return (await pool.query<{ n: number }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM like_seq")).rows[0]!.n;
}

async function walLsn(admin: Pool): Promise<bigint> {
  const { rows } = await admin.query<{ b: string }>("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS b");
  return BigInt(rows[0]!.b.split(".")[0]!);
}

/** WORKERS writers for `seconds` (bench/load.ts runForSeconds), taking the variant's next toggles. */
async function runFor(v: Variant, seconds: number): Promise<{ ops: number; errors: number; latencies: number[]; seconds: number }> {
  const f = await runForSeconds(seconds, WORKERS, (k) => {
    const { j, like } = toggle(k, CYCLE_OPS, USERS);
    const user = `${v.users}${j}`;
    const itemId = item(j % ITEMS);
    return like ? v.likes.like(user, itemId) : v.likes.unlike(user, itemId);
  }, undefined, v.next);
  v.next += f.ops;
  return { ops: f.ops, errors: f.errors, latencies: [...(f.latencyMs ?? [])], seconds: f.seconds };
}

const bench = await BenchCluster.start("social-ledger-lanes-", { max_connections: "150" });
try {
  const admin = bench.pool("postgres", 1);
  process.stdout.write(`group commit lanes: ${WORKERS} writers, ${CHUNKS} chunks of ${SECONDS} s per variant, load average ${os.loadavg()[0]!.toFixed(1)} at start\n`);
  for (const P of PARTITIONS) {
    const pool = await bench.ledgerDatabase(`lanes_p${P}`, { partitions: P, max: WORKERS + 4 });
    for (let n = 0; n < ITEMS; n++) await pool.query("INSERT INTO item (item_id, kind) VALUES ($1, 'plain') ON CONFLICT DO NOTHING", [item(n)]);
    const specs: { name: string; options: { batchMax?: number; lanes?: number } }[] = [
      { name: "unbatched", options: { batchMax: 1 } },
      { name: `per partition (L=${P})`, options: {} },
      ...LANES.filter((l) => l < P).map((l) => ({ name: `lanes L=${l}`, options: { lanes: l } })),
    ];
    const variants: Variant[] = [];
    for (const [i, spec] of specs.entries()) {
      const v: Variant = { name: spec.name, likes: await LikeService.open(pool, spec.options), users: `v${i}u`, next: 0, ops: 0, changed: 0, wal: 0, seconds: 0, errors: 0, latencies: [], chunkRates: [] };
      await runFor(v, 1); // warm-up: inserts the first pairs' fact rows
      variants.push(v);
    }
    await admin.query("CHECKPOINT");
    const stats0 = variants.map((v) => v.likes.batchStats() ?? { batches: 0, writes: 0, largest: 0 });
    for (let c = 0; c < CHUNKS; c++) {
      for (let n = 0; n < variants.length; n++) {
        const v = variants[(n + c) % variants.length]!;
        const changed0 = await changedSoFar(pool);
        const wal0 = await walLsn(admin);
        const r = await runFor(v, SECONDS);
        v.wal += Number((await walLsn(admin)) - wal0);
        const changed = (await changedSoFar(pool)) - changed0;
        v.changed += changed;
        v.chunkRates.push(changed / r.seconds);
        v.ops += r.ops;
        v.errors += r.errors;
        v.seconds += r.seconds;
        v.latencies.push(...r.latencies);
      }
    }
    const base = variants[0]!.changed / variants[0]!.seconds;
    const perPartition = variants[1]!.changed / variants[1]!.seconds;
    process.stdout.write(`P=${P} (load average ${os.loadavg()[0]!.toFixed(1)}):\n`);
    for (const [i, v] of variants.entries()) {
      const s = v.likes.batchStats();
      const batches = s ? `${((s.writes - stats0[i]!.writes) / Math.max(1, s.batches - stats0[i]!.batches)).toFixed(1)} per batch (largest ${s.largest})` : "1 per call";
      const rate = v.changed / v.seconds;
      const sorted = Float64Array.from(v.latencies).sort();
      // The same round's chunks ran back to back: their ratio is the pair least moved by the machine's load.
      const paired = Float64Array.from(v.chunkRates.map((x, c) => x / variants[1]!.chunkRates[c]!)).sort();
      const pairedNote = i === 1 ? "" : `  per round ÷per-partition median ${percentile(paired, 50).toFixed(2)}, above 1 in ${paired.filter((x) => x > 1).length}/${paired.length}`;
      process.stdout.write(
        `  ${v.name.padEnd(22)} CHANGED/s ${rate.toFixed(0).padStart(5)}  ÷unbatched ${(rate / base).toFixed(2)}  ÷per-partition ${(rate / perPartition).toFixed(2)}${pairedNote}` +
          `  writes ${batches}  WAL ${Math.round(v.wal / Math.max(1, v.changed))} B/CHANGED  p50 ${percentile(sorted, 50).toFixed(1)} ms  p99 ${percentile(sorted, 99).toFixed(1)} ms` +
          `${v.errors ? `  ${v.errors} errors` : ""}  (${v.ops} ops, CHANGED ${((100 * v.changed) / Math.max(1, v.ops)).toFixed(0)}%; chunks ${v.chunkRates.map((x) => x.toFixed(0)).join(" ")})\n`,
      );
    }
  }
} finally {
  await bench.stop();
}
