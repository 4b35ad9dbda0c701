/**
 * `npm run bench`: figures, not a timed test. In one run, on its own embedded PostgreSQL 16
 * cluster (free port, temporary directory, removed at the end), measures like throughput and
 * latency through the library and through HTTP, count reads, and the consumer's apply rate,
 * prints a table and writes .tmp/bench-results/<timestamp>.json (git-ignored; RESULTS_DIR).
 *
 *   node --import tsx bench/run.ts [--quick] [--partitions P] [--compare-partitions]
 *        [--workers N] [--connections C] [--ops n] [--requests n] [--reads n] [--skip-replica] [--history n]
 *
 * This file only wires the run: options.ts (command line, sizes, the workload's shape), lifecycle.ts
 * (what is started is stopped, Ctrl-C included), target.ts (one benchmark database), write-phases.ts
 * and read-phases.ts (the rows), summary.ts (audits, printed table and ratios), report.ts (table, notes,
 * results file).
 */
import { existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { createPool } from "../src/db/pool.ts";
import { countLayerRows, redisOutageWriteRows } from "./count-layer.ts";
import { ReplicaBench } from "./replica-reads.ts";
import { clusterCountRows } from "./count-layer-cluster.ts";
import { jetstreamRows } from "./jetstream.ts";
import { retentionFigures, type RetentionFigures } from "./retention.ts";
import { OP } from "./ratios.ts";
import { machineInfo, problems, progress, writeResults, type Row } from "./report.ts";
import { formatWaits, sampleWaits } from "./wait-events.ts";
import { Aborted, abort, checkAbort, cleanup, started } from "./lifecycle.ts";
import {
  BENCH_APPLICATION,
  HOT_ITEM,
  ITEMS,
  USERS,
  WRITE_CHUNKS,
  httpUser,
  item,
  parseOptions,
  type Opts,
} from "./options.ts";
import { openTarget, type Target } from "./target.ts";
import { lagUnderPeakPhase, peakWriteAndDrainPhase } from "./consumer-phases.ts";
import { SWEEP, formatSweep, formatSweepRatios, runSweep, sweepRatios, type SweepResult } from "./sweep.ts";
import { parseScaleOptions, runScale } from "./scale.ts";
import {
  WRITE_OPS,
  alternatingWrites,
  chapterWrites,
  followPhase,
  httpWrites,
  batchNote,
  lagUnderLoadPhase,
  libraryWrites,
  projectorDrainPhase,
  rawInserts,
  otherServiceWrites,
  timedHttpWrites,
  timedLibraryWrites,
  walPosition,
  type Chunk,
} from "./write-phases.ts";
import { auditTargets, printSummary } from "./summary.ts";
import { PGBENCH_MISSING, findPgbench, pgbenchInsertKind, pgbenchRows } from "./pgbench.ts";
import {
  commentCountReadPhase,
  commentCreatePhase,
  drainPhase,
  httpReads,
  interleavedReadPhase,
  readPhase,
} from "./read-phases.ts";

/** Where a run's JSON goes: outside the source tree's tracked files (.gitignore has .tmp/). */
const RESULTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", ".tmp", "bench-results");

function redisServerAvailable(): boolean {
  return ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].some((p) => existsSync(p));
}

// ---- main ----

async function main(o: Opts): Promise<void> {
  const startedAt = new Date();
  const loadAtStart = os.loadavg();
  const t0 = performance.now();
  process.stderr.write(
    `social-ledger bench: P=${o.partitions.join(" vs P=")}, ${o.workers} library workers, ${o.connections} HTTP connections, ` +
      `each write row ${WRITE_CHUNKS} chunks of ${o.chunkSeconds} s, ${o.reads} reads per read phase${o.quick ? " (quick)" : ""}\n`,
  );

  started.root = await clusterTempDir("social-ledger-bench-");
  started.dataDir = path.join(started.root, "pgdata");
  // The sweep adds pgbench's 128 clients and two pools of its own to the main phases' pools.
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir, settings: { max_connections: "300" } });
  started.cluster = await started.starting;
  checkAbort();
  const cluster = started.cluster;
  started.admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  started.sampler = createPool({
    connectionString: cluster.connectionString("postgres"),
    max: 1,
    applicationName: "social-ledger-bench-sampler",
  });
  const pg: Record<string, string> = {};
  for (const setting of ["server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections"]) {
    const { rows } = await started.admin.query<Record<string, string>>(`SHOW ${setting}`);
    pg[setting] = Object.values(rows[0]!)[0]!;
  }
  process.stderr.write(
    `  PostgreSQL ${pg.server_version} on 127.0.0.1:${cluster.port} (fsync ${pg.fsync}, synchronous_commit ${pg.synchronous_commit})\n`,
  );
  const pgbench = findPgbench();
  process.stderr.write(
    `  ${pgbench ? `raw baselines by ${pgbench} (${o.pgbenchSeconds} s per variant; the 16-client INSERT in ${WRITE_CHUNKS} chunks of at least 3 s)` : PGBENCH_MISSING}\n`,
  );

  const sweepShape = o.quick ? SWEEP.quick : SWEEP.full;
  if (o.sweep === "only") return sweepOnly(o, startedAt, loadAtStart, t0, pg, pgbench);

  const tokens = Array.from({ length: USERS }, (_, n) => httpUser(n));
  const poolSize = Math.max(o.workers, o.connections) + 4;
  const targets: Target[] = [];
  for (const p of o.partitions) {
    targets.push(await openTarget(cluster, p, poolSize, tokens));
    checkAbort();
  }

  // Warm-up (not reported), the write pattern on items of its own: JIT, connection pools,
  // plan caches, the first checkpoints and autovacuum passes of the fresh tables.
  process.stderr.write("  warming up\n");
  for (const t of targets) {
    await libraryWrites(t, o, false, o.warmupOps, (j) => `warm-${j % 8}`);
    await httpWrites(t, o, false, o.warmupRequests, (j) => `warm-${j % 8}`);
    checkAbort();
  }

  const rows: Row[] = [];
  let phases = 0;
  // Every phase runs on each database in turn; the order alternates (ABBA) so that neither
  // database always goes first, and rows stay in the order of the databases.
  const phase = async (make: (t: Target) => Promise<Row | Row[]>) => {
    const order = phases++ % 2 === 0 ? targets : [...targets].reverse();
    const done: Row[] = [];
    for (const t of order) {
      const walBefore = await walPosition();
      const waits = sampleWaits(started.sampler!, t.database, BENCH_APPLICATION);
      const made = await make(t);
      const waited = await waits.stop();
      checkAbort();
      // WAL per write does not depend on how busy the machine is (full-page images after a
      // checkpoint add to it, so it is an upper bound of the steady state).
      if (!Array.isArray(made) && WRITE_OPS.has(made.op) && made.figures.ops > 0) {
        const bytesPerOp = ((await walPosition()) - walBefore) / made.figures.ops;
        made.note = `${made.note}, WAL ${Math.round(bytesPerOp)} B/op, ${formatWaits(waited)}`;
        made.extra = { ...made.extra, walBytesPerOp: bytesPerOp, waitSamples: Object.fromEntries(waited) };
      }
      for (const row of Array.isArray(made) ? made : [made]) {
        done.push(row);
        progress(row);
      }
    }
    rows.push(...targets.flatMap((t) => done.filter((r) => r.partitions === t.partitions)));
  };
  await phase((t) =>
    alternatingWrites(
      t,
      [
        { op: OP.rawInsert, path: "library", run: (chunk) => rawInserts(t, o, chunk), rawInsert: true },
        {
          op: OP.mixed,
          path: "library",
          run: (chunk) => timedLibraryWrites(t, o, false, chunk),
          extraNote: () => batchNote(t),
        },
        {
          op: OP.mixedUnbatched,
          path: "library",
          run: (chunk) => otherServiceWrites(t.likesUnbatched, "nb", o, chunk),
        },
        // The chapter's transaction needs one sequence row for everybody: P = 1 databases only.
        ...(t.partitions === 1
          ? [{ op: OP.chapter, path: "library" as const, run: (chunk: Chunk) => chapterWrites(t, o, chunk) }]
          : []),
        { op: OP.hot, path: "library", run: (chunk) => timedLibraryWrites(t, o, true, chunk) },
        { op: OP.mixed, path: "HTTP", run: (chunk) => timedHttpWrites(t, o, false, chunk) },
        { op: OP.hot, path: "HTTP", run: (chunk) => timedHttpWrites(t, o, true, chunk) },
        ...(pgbench ? [pgbenchInsertKind(pgbench, cluster, t, o.pgbenchSeconds, WRITE_CHUNKS)] : []),
      ],
      WRITE_CHUNKS,
      o.chunkSeconds,
    ),
  );
  // The other raw baselines by PostgreSQL's own C client (its 16-client INSERT ran in the chunks above).
  if (pgbench) await phase((t) => pgbenchRows(pgbench, cluster, t, o.pgbenchSeconds));
  // 16 workers: count reads and primary-key reads interleaved on the same workers, so both
  // p99s meet the same moments of a shared machine (two phases a second apart did not).
  await phase((t) => interleavedReadPhase(t, o, OP.readBacklog, OP.pkBacklog, o.workers));
  await phase((t) => interleavedReadPhase(t, o, OP.readBacklogAlone, OP.pkBacklogAlone));
  await phase((t) => readPhase(t, OP.readBacklog, "HTTP", () => httpReads(t, o)));
  await phase((t) => drainPhase(t));
  await phase((t) => interleavedReadPhase(t, o, OP.readDrained, OP.pkDrained, o.workers));
  await phase((t) => interleavedReadPhase(t, o, OP.readDrainedAlone, OP.pkDrainedAlone));
  await phase((t) => readPhase(t, OP.readDrained, "HTTP", () => httpReads(t, o)));

  await phase((t) => lagUnderLoadPhase(t, o));
  await phase((t) => peakWriteAndDrainPhase(t, o));
  await phase((t) => lagUnderPeakPhase(t, o));
  // The side phases below measure other components (Redis, a standby, NATS). One that fails (a
  // Redis command deadline missed on a loaded machine, say) is reported and skipped: the write
  // and read figures above, the ratios and the audits are still worth printing.
  const failedPhases: string[] = [];
  const sidePhase = async (name: string, run: () => Promise<void>) => {
    try {
      await run();
    } catch (err) {
      if (err instanceof Aborted || abort.signal.aborted) throw err;
      const message = err instanceof Error ? err.message : String(err);
      failedPhases.push(`${name} phase failed, its rows are missing: ${message}`);
      process.stderr.write(`  ${name} phase failed (skipped): ${message}\n`);
      // The audits at the end expect drained counts.
      for (const t of targets) await t.ledger.likeConsumer.drain();
    }
  };
  // Issue 10: the Redis count layer next to the PostgreSQL read (skipped without redis-server).
  if (redisServerAvailable())
    await sidePhase("Redis count layer", async () => {
      await phase(async (t) => {
        const made = await countLayerRows(
          t.pool,
          t.ledger.likes,
          {
            reads: o.reads,
            workers: o.workers,
            items: Array.from({ length: ITEMS }, (_, k) => item(k)),
            hotItem: HOT_ITEM,
          },
          abort.signal,
        );
        // The reconciliation rows wrote likes: the audit at the end expects a drained count.
        await t.ledger.likeConsumer.drain();
        return made.map((r): Row => ({
          op: r.op,
          path: "library",
          partitions: t.partitions,
          figures: r.figures,
          note: [r.note, ...problems(r.figures)].join(", "),
        }));
      });
      // Issue 10: "Redis unreachable for a while: writes keep their throughput", measured.
      await phase(async (t) => {
        const made = await redisOutageWriteRows(
          t.ledger,
          { requests: o.requests, connections: o.connections, items: Array.from({ length: ITEMS }, (_, k) => item(k)) },
          (i) => (started.cannon = i),
        );
        await t.ledger.likeConsumer.drain();
        return made.map((r): Row => ({
          op: r.op,
          path: "HTTP",
          partitions: t.partitions,
          figures: r.figures,
          note: [r.note, ...problems(r.figures)].join(", "),
        }));
      });
    });

  // Issue 14: reads on a hot standby of this cluster next to the same reads on the primary.
  if (!o.skipReplica)
    await sidePhase("streaming replica", async () => {
      const replicas = new ReplicaBench(cluster, started.root!, { max_connections: "300" });
      try {
        await phase(async (t) =>
          (
            await replicas.rows(
              t,
              { ...o, items: Array.from({ length: ITEMS }, (_, k) => item(k)), authorization: t.auth[0]! },
              abort.signal,
            )
          ).map((r): Row => ({
            op: r.op,
            path: r.path,
            partitions: t.partitions,
            figures: r.figures,
            note: [r.note, ...problems(r.figures)].join(", "),
          })),
        );
      } finally {
        await replicas.stop();
      }
    });

  // Issue 14: count reads from one Redis node against a local Redis Cluster (skipped without redis-cli).
  if (redisServerAvailable() && ["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"].some((p) => existsSync(p)))
    await sidePhase("Redis Cluster", async () => {
      await phase(async (t) => {
        const made = await clusterCountRows(
          t.pool,
          {
            reads: o.reads,
            workers: o.workers,
            items: Array.from({ length: ITEMS }, (_, k) => item(k)),
            hotItem: HOT_ITEM,
          },
          abort.signal,
        );
        return made.map((r): Row => ({
          op: r.op,
          path: "library",
          partitions: t.partitions,
          figures: r.figures,
          note: [r.note, ...problems(r.figures)].join(", "),
        }));
      });
    });

  // Issue 14: consumers over JetStream next to direct polling (skipped without nats-server).
  if (existsSync("/usr/sbin/nats-server"))
    await sidePhase("JetStream", async () => {
      await phase(async (t) =>
        (
          await jetstreamRows(t.ledger, {
            events: 2 * o.ops,
            batchSize: 200,
            items: Array.from({ length: ITEMS }, (_, k) => item(k)),
          })
        ).map((r): Row => ({ op: r.op, path: "library", partitions: t.partitions, figures: r.figures, note: r.note })),
      );
    });

  await phase((t) => followPhase(t, o));
  await phase((t) => projectorDrainPhase(t));

  const commentPosts = new Map<number, string>();
  for (const t of targets)
    commentPosts.set(t.partitions, (await t.ledger.posts.createPost("acct0", "PUBLIC", "bench post")).postId);
  await phase((t) => commentCreatePhase(t, o, commentPosts.get(t.partitions)!));
  await phase((t) => commentCountReadPhase(t, o, commentPosts.get(t.partitions)!));

  let retention: RetentionFigures | undefined;
  if (o.history > 0) {
    retention = await retentionFigures(
      cluster,
      started.admin,
      {
        history: o.history,
        partitions: o.partitions[0]!,
        workers: o.workers,
        ops: o.ops,
        reads: o.reads,
      },
      (pool) => started.pools.push(pool),
      (line) => process.stderr.write(`  ${line}\n`),
    );
    checkAbort();
    rows.push(...retention.rows);
  }

  const sweep = o.sweep === "on" ? await runSweep(started.cluster!, o, pgbench, sweepShape) : undefined;
  checkAbort();

  // The figures of a run that broke an invariant mean nothing: check both sides.
  const { audits, auditLines } = await auditTargets([...targets, ...(sweep?.targets ?? [])], retention);
  const seconds = (performance.now() - t0) / 1000;

  const figures = printSummary(
    rows,
    retention,
    [...auditLines, ...failedPhases, ...(pgbench ? [] : [PGBENCH_MISSING])],
    o,
    loadAtStart,
  );

  const sweepFigures = sweep ? printSweep(sweep, o.sweepConsumers) : undefined;

  const file = await writeResults(RESULTS_DIR, startedAt, {
    startedAt: startedAt.toISOString(),
    seconds: Math.round(seconds * 10) / 10,
    machine: { ...machineInfo(), loadAvgAtStart: loadAtStart, partitions: o.partitions },
    postgres: pg,
    options: o,
    rows: resultRows(rows),
    ratios: figures,
    ...(sweep ? { sweep: { rows: resultRows(sweep.rows), ratios: sweepFigures } } : {}),
    ...(retention ? { retention: { summary: retention.summary, sizes: retention.sizes } } : {}),
    audits,
  });
  process.stdout.write(`results: ${path.relative(process.cwd(), file)} (run took ${seconds.toFixed(0)} s)\n`);
  // A run with a side phase missing printed what it had, but is not a complete run.
  if (failedPhases.length > 0 || !Object.values(audits).every((a) => (a as { clean: boolean }).clean))
    process.exitCode = 1;
}

function resultRows(rows: readonly Row[]): Record<string, unknown>[] {
  return rows.map((r) => {
    const figures = { ...r.figures };
    delete figures.latencyMs;
    return { op: r.op, path: r.path, partitions: r.partitions, ...figures, note: r.note, ...r.extra };
  });
}

/** The sweep's table and ratios on stdout; the ratios returned for the results file. */
function printSweep(sweep: SweepResult, consumers: boolean): ReturnType<typeof sweepRatios> {
  const figures = sweepRatios(sweep.rows);
  process.stdout.write(
    `\nconcurrency sweep (like and follow CHANGED/s, p50/p99 ms, consumer lag in events; CPU µs per operation: ` +
      `"node" the main thread's (the callers' or the HTTP server's, consumers included), "all" every core of the machine's ` +
      `(node, PostgreSQL, pgbench)), P = 1 and the default P, a pool of 20, ` +
      `${consumers ? "consumers running" : "consumers STOPPED while writing (--sweep-consumers-off: lag figures mean nothing)"}:\n` +
      `${formatSweep(sweep.rows)}\n\nratios of the concurrency sweep (goals of the write path under concurrency), each from rows of this run:\n` +
      `${formatSweepRatios(figures)}\n\n`,
  );
  return figures;
}

/** `--sweep-only`: the concurrency sweep alone, its audits and results file. */
async function sweepOnly(
  o: Opts,
  startedAt: Date,
  loadAtStart: number[],
  t0: number,
  pg: Record<string, string>,
  pgbench: string | undefined,
): Promise<void> {
  const sweep = await runSweep(started.cluster!, o, pgbench, o.quick ? SWEEP.quick : SWEEP.full);
  const { audits, auditLines } = await auditTargets(sweep.targets, undefined);
  const figures = printSweep(sweep, o.sweepConsumers);
  const seconds = (performance.now() - t0) / 1000;
  process.stdout.write(
    [
      ...auditLines,
      ...(pgbench ? [] : [PGBENCH_MISSING]),
      `Note: absolute numbers on a shared ${os.cpus().length}-core machine are noisy (1-min load average ${loadAtStart[0]!.toFixed(1)} at the start,` +
        ` ${os.loadavg()[0]!.toFixed(1)} at the end); only side-by-side comparisons within one run mean something.`,
    ].join("\n") + "\n",
  );
  const file = await writeResults(RESULTS_DIR, startedAt, {
    startedAt: startedAt.toISOString(),
    seconds: Math.round(seconds * 10) / 10,
    machine: { ...machineInfo(), loadAvgAtStart: loadAtStart },
    postgres: pg,
    options: o,
    sweep: { rows: resultRows(sweep.rows), ratios: figures },
    audits,
  });
  process.stdout.write(`results: ${path.relative(process.cwd(), file)} (run took ${seconds.toFixed(0)} s)\n`);
  if (!Object.values(audits).every((a) => (a as { clean: boolean }).clean)) process.exitCode = 1;
}

const options = parseOptions();
try {
  if (options.scale > 0) await runScale(parseScaleOptions([], options.scale));
  else await main(options);
} catch (err) {
  if (!(err instanceof Aborted) && !abort.signal.aborted) {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  }
} finally {
  await cleanup();
}
process.exit(abort.signal.aborted ? 130 : (process.exitCode ?? 0));
