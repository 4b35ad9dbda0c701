/**
 * Group commit of relation writes side by side (docs/write-path.md, "Group commit"): per
 * partition count, one database and two RelationServices on accounts of their own, unbatched
 * (LEDGER_WRITE_BATCH_MAX = 1: one relation_follow / relation_unfollow call per write) and batched
 * (the default, one batcher per followee partition, K = 2). 16 writers toggle follow/unfollow
 * (pair j: account j follows account (7j + 1) mod 1000, the main bench's pattern); the two take
 * turns in timed chunks, the order rotating each round, so the ratio compares the same minutes
 * of a shared machine.
 *
 *   node --import tsx bench/relation-group-commit.ts [--partitions 1,16] [--seconds 3] [--chunks 6]
 */
import os from "node:os";
import { parseArgs } from "node:util";
import type { Pool } from "../src/db/pool.ts";
import { transactionStats } from "../src/db/transaction.ts";
import { auditRelations, relationAuditClean } from "../src/relations/relation-audit.ts";
import { RelationService } from "../src/relations/relation-service.ts";
import { BenchCluster } from "./bench-cluster.ts";
import { percentile, runForSeconds } from "./load.ts";
import { USERS, toggle } from "./options.ts";

const { values } = parseArgs({ options: { partitions: { type: "string" }, seconds: { type: "string" }, chunks: { type: "string" } } });
const PARTITIONS = values.partitions ? values.partitions.split(",").map(Number) : [1, 16];
const SECONDS = Number(values.seconds ?? 3);
const CHUNKS = Number(values.chunks ?? 6);
const WORKERS = 16;
const CYCLE_OPS = 2 * USERS;

interface Variant {
  name: string;
  rel: RelationService;
  prefix: string;
  next: number;
  ops: number;
  changed: number;
  wal: number;
  seconds: number;
  errors: number;
  latencies: number[];
  chunkRates: number[];
}

async function eventsSoFar(pool: Pool): Promise<number> {
  return (await pool.query<{ n: number }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM event_seq")).rows[0]!.n;
}

async function walLsn(admin: Pool): Promise<bigint> {
  const { rows } = await admin.query<{ b: string }>("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS b");
  return BigInt(rows[0]!.b.split(".")[0]!);
}

/** WORKERS writers for `seconds` (bench/load.ts runForSeconds), taking the variant's next toggles. */
async function runFor(v: Variant, seconds: number): Promise<{ ops: number; errors: number; latencies: number[]; seconds: number }> {
  const f = await runForSeconds(seconds, WORKERS, (k) => {
    const { j, like: follow } = toggle(k, CYCLE_OPS, USERS);
    const follower = `${v.prefix}${j}`;
    const followee = `${v.prefix}${(j * 7 + 1) % USERS}`;
    return follow ? v.rel.follow(follower, followee) : v.rel.unfollow(follower, followee);
  }, undefined, v.next);
  v.next += f.ops;
  return { ops: f.ops, errors: f.errors, latencies: [...(f.latencyMs ?? [])], seconds: f.seconds };
}

const bench = await BenchCluster.start("social-ledger-relation-gc-", { max_connections: "100" });
try {
  const admin = bench.pool("postgres", 1);
  process.stdout.write(`relation group commit: ${WORKERS} writers, ${CHUNKS} chunks of ${SECONDS} s per variant, load average ${os.loadavg().map((x) => x.toFixed(1)).join(" ")} at start\n`);
  for (const P of PARTITIONS) {
    const pool = await bench.ledgerDatabase(`relgc_p${P}`, { partitions: P, max: WORKERS + 4 });
    const variants: Variant[] = [];
    for (const [i, spec] of [{ name: "unbatched", batchMax: 1 }, { name: "batched", batchMax: undefined }].entries()) {
      const prefix = `v${i}a`;
      await pool.query("INSERT INTO account (account_id) SELECT $1 || n FROM generate_series(0, $2::int - 1) AS n", [prefix, USERS]);
      const rel = await RelationService.open(pool, spec.batchMax === undefined ? {} : { batchMax: spec.batchMax });
      const v: Variant = { name: spec.name, rel, prefix, next: 0, ops: 0, changed: 0, wal: 0, seconds: 0, errors: 0, latencies: [], chunkRates: [] };
      await runFor(v, 1); // warm-up: inserts the first pairs' relation rows
      variants.push(v);
    }
    await admin.query("CHECKPOINT");
    const retries0 = transactionStats.retries;
    const stats0 = variants.map((v) => v.rel.batchStats() ?? { batches: 0, writes: 0, largest: 0 });
    for (let c = 0; c < CHUNKS; c++) {
      for (let n = 0; n < variants.length; n++) {
        const v = variants[(n + c) % variants.length]!;
        const changed0 = await eventsSoFar(pool);
        const wal0 = await walLsn(admin);
        const r = await runFor(v, SECONDS);
        v.wal += Number((await walLsn(admin)) - wal0);
        const changed = (await eventsSoFar(pool)) - changed0;
        v.changed += changed;
        v.chunkRates.push(changed / r.seconds);
        v.ops += r.ops;
        v.errors += r.errors;
        v.seconds += r.seconds;
        v.latencies.push(...r.latencies);
      }
    }
    const audit = await auditRelations(pool);
    const base = variants[0]!.changed / variants[0]!.seconds;
    process.stdout.write(`P=${P} (load average ${os.loadavg().map((x) => x.toFixed(1)).join(" ")}; audit ${relationAuditClean(audit) ? "clean" : JSON.stringify(audit)}; tx retries ${transactionStats.retries - retries0}):\n`);
    for (const [i, v] of variants.entries()) {
      const s = v.rel.batchStats();
      const batches = s ? `${((s.writes - stats0[i]!.writes) / Math.max(1, s.batches - stats0[i]!.batches)).toFixed(1)} per batch (largest ${s.largest})` : "1 per call";
      const rate = v.changed / v.seconds;
      const sorted = Float64Array.from(v.latencies).sort();
      const paired = Float64Array.from(v.chunkRates.map((x, c) => x / variants[0]!.chunkRates[c]!)).sort();
      const pairedNote = i === 0 ? "" : `  per round ÷unbatched median ${percentile(paired, 50).toFixed(2)}, above 1 in ${paired.filter((x) => x > 1).length}/${paired.length}`;
      process.stdout.write(
        `  ${v.name.padEnd(10)} CHANGED/s ${rate.toFixed(0).padStart(5)}  ÷unbatched ${(rate / base).toFixed(2)}${pairedNote}` +
          `  writes ${batches}  WAL ${Math.round(v.wal / Math.max(1, v.changed))} B/CHANGED  p50 ${percentile(sorted, 50).toFixed(1)} ms  p99 ${percentile(sorted, 99).toFixed(1)} ms` +
          `${v.errors ? `  ${v.errors} errors` : ""}  (${v.ops} ops, CHANGED ${((100 * v.changed) / Math.max(1, v.ops)).toFixed(0)}%; chunks ${v.chunkRates.map((x) => x.toFixed(0)).join(" ")})\n`,
      );
    }
  }
} finally {
  await bench.stop();
}
