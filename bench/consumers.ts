/**
 * `npm run bench:consumers`: the consumer and count-read rows of `npm run bench` alone, for the
 * question "do the consumers keep up with the writers at their peak, and what does a count read
 * cost next to a primary-key read": per P, the peak write rate and the drain of its backlog, the
 * lag sampled under peak writes with the consumer loops on (bench/consumer-phases.ts), and the
 * interleaved count and primary-key reads with a backlog pending and drained (bench/read-phases.ts).
 * Prints the table and the ratios of those rows; phases alternate between the databases (ABBA).
 *
 *   node --import tsx bench/consumers.ts [--partitions 1,16] [--quick] [--reads n] [--workers N]
 */
import path from "node:path";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { createPool } from "../src/db/pool.ts";
import { lagUnderPeakPhase, peakWriteAndDrainPhase } from "./consumer-phases.ts";
import { Aborted, abort, checkAbort, cleanup, started } from "./lifecycle.ts";
import { USERS, httpUser, parseOptions, type Opts } from "./options.ts";
import { OP, formatRatios, ratios } from "./ratios.ts";
import { interleavedReadPhase } from "./read-phases.ts";
import { formatTable, progress, type Row } from "./report.ts";
import { openTarget, type Target } from "./target.ts";
import { libraryWrites } from "./write-phases.ts";

async function main(o: Opts): Promise<void> {
  started.root = await clusterTempDir("social-ledger-bench-consumers-");
  started.dataDir = path.join(started.root, "pgdata");
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir, settings: { max_connections: "200" } });
  started.cluster = await started.starting;
  started.admin = createPool({ connectionString: started.cluster.connectionString("postgres"), max: 1 });
  const tokens = Array.from({ length: USERS }, (_, n) => httpUser(n));
  const targets: Target[] = [];
  for (const p of o.partitions) targets.push(await openTarget(started.cluster, p, o.workers + 4, tokens));
  for (const t of targets) await libraryWrites(t, o, false, o.warmupOps, (j) => `warm-${j % 8}`);
  checkAbort();
  const rows: Row[] = [];
  let phases = 0;
  const phase = async (make: (t: Target) => Promise<Row | Row[]>) => {
    const order = phases++ % 2 === 0 ? targets : [...targets].reverse();
    for (const t of order) {
      const made = await make(t);
      checkAbort();
      for (const row of Array.isArray(made) ? made : [made]) {
        rows.push(row);
        progress(row);
      }
    }
  };
  await phase((t) => peakWriteAndDrainPhase(t, o));
  // The peak rows' users liked and unliked: the backlog of the read rows is what the drain left (none).
  await phase((t) => libraryWrites(t, o, false).then(() => []));
  await phase((t) => interleavedReadPhase(t, o, OP.readBacklog, OP.pkBacklog, o.workers));
  await phase((t) => interleavedReadPhase(t, o, OP.readBacklogAlone, OP.pkBacklogAlone));
  await phase(async (t) => {
    await t.ledger.likeConsumer.drain(1000);
    return [];
  });
  await phase((t) => interleavedReadPhase(t, o, OP.readDrained, OP.pkDrained, o.workers));
  await phase((t) => interleavedReadPhase(t, o, OP.readDrainedAlone, OP.pkDrainedAlone));
  await phase((t) => lagUnderPeakPhase(t, o));
  const sorted = targets.flatMap((t) => rows.filter((r) => r.partitions === t.partitions));
  process.stdout.write(
    `\n${formatTable(sorted)}\n\nratios, each from rows of this run:\n${formatRatios(ratios(sorted))}\n`,
  );
}

try {
  await main(parseOptions());
} catch (err) {
  if (!(err instanceof Aborted) && !abort.signal.aborted) {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  }
} finally {
  await cleanup();
}
process.exit(abort.signal.aborted ? 130 : (process.exitCode ?? 0));
