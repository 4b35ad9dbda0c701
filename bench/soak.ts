/**
 * `npm run soak -- --minutes N`: the service under its real mix for N minutes at a fixed offered
 * rate, sampled every minute, judged at the end (issue 34). It starts its own embedded PostgreSQL 16
 * cluster, redis-server on a free port, `social-ledger serve` (consumers, Redis counts, webhook
 * delivery, the periodic prune and audit), a second consumer process (`social-ledger worker`) and a
 * `social-ledger webhook-worker` as child processes, and a webhook receiver over HTTP (bench/soak-processes.ts, bench/soak-receiver.ts);
 * the load is open-loop (bench/soak-load.ts). Each sample (bench/soak-sampler.ts) reads every
 * process's RSS and descriptors, the heaps, the connections, the outbox and dedup-key rows, the lag
 * and the window's p99. At the end: each series' slope and whether it is within noise, the p99 of
 * the last twelfth ÷ the first ten minutes, the errors and the full `social-ledger audit`
 * (bench/soak-report.ts, support/soak-goals.ts); exit code 1 when a goal is not met.
 *
 * Options:
 *   --minutes N      length of the run (default 60)
 *   --sample-ms MS   time between samples (default 60000; shorter for a trial run)
 *   --rate R         offered requests per second; without it the soak calibrates: it pushes the mix
 *                    closed-loop (CALIBRATION_CONNECTIONS senders, CALIBRATION_SECONDS), offers a
 *                    fifth of the rate answered, and starts once the consumers and webhooks have
 *                    drained what the calibration wrote (docs/testing.md)
 *   --users U        accounts (default 200)   --items I   items to like (default 500)
 */
import { parseArgs } from "node:util";
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { abort, cleanup } from "./lifecycle.ts";
import { outboxBound, p99Of, periodicAuditsExpected } from "../support/soak-goals.ts";
import { SoakLoad, outboxEventsPerSecond, windowLatencies, type LoadWindow } from "./soak-load.ts";
import { SOAK_SETTINGS, startSoakProcesses } from "./soak-processes.ts";
import { WebhookReceiver } from "./soak-receiver.ts";
import { judge, printSamples, printVerdict, writeResults, type SoakOutcome } from "./soak-report.ts";
import { SoakSampler, failureCounters, type Sample } from "./soak-sampler.ts";
import { pollUntil } from "../support/poll.ts";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "60" },
    "sample-ms": { type: "string", default: "60000" },
    rate: { type: "string" },
    users: { type: "string", default: "200" },
    items: { type: "string", default: "500" },
  },
});
const positive = (name: keyof typeof values) => {
  const n = Number(values[name]);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number, got ${values[name]}`);
  return n;
};
const minutes = positive("minutes");
const sampleMs = positive("sample-ms");
const fixedRate = values.rate === undefined ? undefined : positive("rate");
const users = Math.round(positive("users"));
const items = Math.round(positive("items"));
const sampleCount = Math.floor((minutes * 60_000) / sampleMs);
if (sampleCount < 4)
  throw new Error(`--minutes ${minutes} with --sample-ms ${sampleMs} gives ${sampleCount} samples; at least 4`);

/** The calibration: closed-loop senders, for how long, and the share of the answered rate the soak offers. */
const CALIBRATION_CONNECTIONS = 32;
const CALIBRATION_SECONDS = 30;
const CALIBRATION_SHARE = 0.2;

const REPO_ROOT = fileURLToPath(new URL("../", import.meta.url));

async function auditCli(env: NodeJS.ProcessEnv): Promise<{ clean: boolean; output: string }> {
  const child = spawn(process.execPath, [path.join(REPO_ROOT, "bin", "social-ledger.mjs"), "audit"], {
    cwd: REPO_ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  return { clean: code === 0, output };
}

/** Sample reads that failed and were repeated (a lost sampler connection): counted with the errors. */
const sampleFailures: string[] = [];
async function sampleWithRetry(read: () => Promise<Sample>): Promise<Sample> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (err) {
      sampleFailures.push(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
      if (attempt === 3) throw err;
    }
  }
}

async function main(): Promise<number> {
  const receiver = await WebhookReceiver.start();
  const procs = await startSoakProcesses();
  console.log(
    `soak: ${minutes} min, a sample every ${sampleMs} ms, ${fixedRate === undefined ? "the rate calibrated" : `${fixedRate} requests/s offered`}; pids: ${procs.nodes.map((n) => `${n.name} ${n.child.pid}`).join(", ")}, postgres ${procs.cluster.pid}, redis ${procs.redisPid}`,
  );
  const setupStarted = Date.now();
  const load = await SoakLoad.prepare(procs.baseUrl, procs.jwtSecret, { users, items });
  console.log(
    `setup: ${users} accounts with a post each, ${items} items in ${((Date.now() - setupStarted) / 1000).toFixed(1)} s`,
  );
  const hook = await fetch(new URL("/v1/admin/webhooks", procs.baseUrl), {
    method: "POST",
    headers: { authorization: `Bearer ${load.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ url: receiver.url, events: ["*"] }),
  });
  if (hook.status !== 201) throw new Error(`registering the webhook: ${hook.status} ${await hook.text()}`);

  const sampler = new SoakSampler({
    pool: procs.pool,
    nodes: procs.nodes.map((n) => ({ name: n.name, pid: n.child.pid, metricsUrl: n.metricsUrl })),
    redisUrl: procs.redis.url,
    pids: { postmaster: procs.cluster.pid!, redis: procs.redisPid },
  });
  await sampler.open();
  let rate = fixedRate;
  let calibration: { capacity: number; seconds: number; connections: number; drainSeconds: number } | undefined;
  if (rate === undefined) {
    const capacity = await load.measureCapacity(CALIBRATION_SECONDS, CALIBRATION_CONNECTIONS);
    rate = Math.max(1, Math.round(capacity * CALIBRATION_SHARE));
    const drainStarted = Date.now();
    await pollUntil(
      "the consumers and webhooks drain after the calibration",
      () => sampler.sample(0, { requests: 0, errors: 0, p99Ms: NaN }),
      (s) => s.lagEvents === 0 && s.webhookBacklog === 0,
      300_000,
      500,
    );
    calibration = {
      capacity,
      seconds: CALIBRATION_SECONDS,
      connections: CALIBRATION_CONNECTIONS,
      drainSeconds: (Date.now() - drainStarted) / 1000,
    };
    console.log(
      `calibration: ${capacity.toFixed(1)} requests/s answered by ${CALIBRATION_CONNECTIONS} closed-loop senders over ${CALIBRATION_SECONDS} s; drained in ${calibration.drainSeconds.toFixed(1)} s; offering ${rate} requests/s (${CALIBRATION_SHARE * 100}%)`,
    );
  }
  const samples: Sample[] = [];
  const windowLatenciesByKind: LoadWindow["byKind"][] = [];
  const periodicAudits = new Map<number, boolean>();
  /** The reports of unclean periodic audits (the first few), for the results file and the errors. */
  const uncleanAudits: { minute: number; report: unknown }[] = [];
  const startedAt = Date.now();
  load.start(rate);
  for (let i = 1; i <= sampleCount && !abort.signal.aborted; i++) {
    // The bench's own clock: sample i is taken at start + i × sample-ms. A sample that took longer
    // than a period (a stalled machine) skips the slots it overran rather than taking them at once
    // with nearly empty windows.
    const behind = Math.floor((Date.now() - startedAt) / sampleMs) - i;
    if (behind >= 1) i += behind;
    if (i > sampleCount) break;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, startedAt + i * sampleMs - Date.now())));
    const window = load.take();
    windowLatenciesByKind.push(window.byKind);
    const sample = await sampleWithRetry(() =>
      sampler.sample((Date.now() - startedAt) / 60_000, {
        requests: window.requests,
        errors: window.errors,
        p99Ms: p99Of(windowLatencies(window.byKind)),
      }),
    );
    samples.push(sample);
    const dashboard = await fetch(new URL(`/v1/admin/dashboard?since=${Date.now()}`, procs.baseUrl), {
      headers: { authorization: `Bearer ${load.adminToken}` },
    });
    const audit = dashboard.ok
      ? ((await dashboard.json()) as { audit: { at: number; clean: boolean; source: string; report: unknown } | null })
          .audit
      : null;
    if (audit?.source === "periodic" && !periodicAudits.has(audit.at)) {
      periodicAudits.set(audit.at, audit.clean);
      if (!audit.clean && uncleanAudits.length < 5)
        uncleanAudits.push({ minute: (audit.at - startedAt) / 60_000, report: audit.report });
    }
    printSamples([sample], i === 1);
    if (procs.nodes.some((n) => n.child.exited)) break;
  }
  await load.stop();
  // Drained before the final audit: the consumers' lag and the webhook backlog back to zero.
  const drained = await pollUntil(
    "the consumers and webhooks drain after the load",
    () => sampler.sample((Date.now() - startedAt) / 60_000, { requests: 0, errors: 0, p99Ms: NaN }),
    (s) => s.lagEvents === 0 && s.webhookBacklog === 0,
    120_000,
    500,
  ).then(
    () => true,
    () => false,
  );
  const audit = await auditCli(procs.env);
  const failures = await failureCounters(procs.nodes.map((n) => n.metricsUrl));
  const processExits = procs.nodes.filter((n) => n.child.exited).length;
  await sampler.close();
  await procs.stop();
  await receiver.close();

  const outcome: SoakOutcome = {
    samples,
    windowLatenciesByKind,
    sampleMinutes: sampleMs / 60_000,
    errors: {
      http: load.totals.errors,
      errorLogLines: procs.nodes.reduce((a, n) => a + n.child.errorLines, 0),
      consumerFailures: failures.consumerFailures,
      webhookFailures: failures.webhookFailures,
      webhookMalformed: receiver.malformed,
      processExits,
      notDrained: drained ? 0 : 1,
      periodicAuditsMissed: Math.max(
        0,
        periodicAuditsExpected((samples.length * sampleMs) / 60_000, SOAK_SETTINGS.auditEveryMs) - periodicAudits.size,
      ),
      sampleFailures: sampleFailures.length,
    },
    firstErrors: [
      ...load.firstErrors,
      ...procs.nodes.flatMap((n) => n.child.firstErrors),
      ...sampleFailures.slice(0, 3).map((e) => `sample: ${e}`),
    ],
    auditClean: audit.clean,
    periodicAudits: {
      seen: periodicAudits.size,
      unclean: [...periodicAudits.values()].filter((clean) => !clean).length,
      uncleanReports: uncleanAudits,
    },
    outboxBound:
      3 *
      outboxBound({
        partitions: SOAK_SETTINGS.partitions,
        keepEvents: SOAK_SETTINGS.keepEvents,
        keepMs: SOAK_SETTINGS.keepMs,
        pruneEveryMs: SOAK_SETTINGS.pruneEveryMs,
        eventsPerSecond: outboxEventsPerSecond(rate),
        lagEvents: Math.max(...samples.map((s) => s.lagEvents)),
      }),
    webhook: { deliveries: receiver.deliveries, distinct: receiver.messageIds.size },
    settings: { minutes, sampleMs, rate, ...(calibration ? { calibration } : {}), users, items, ...SOAK_SETTINGS },
  };
  if (!audit.clean) outcome.firstErrors.push(`audit: ${audit.output.slice(0, 2000)}`);
  const verdict = judge(outcome);
  console.log("");
  printSamples(samples);
  printVerdict(outcome, verdict);
  console.log(`\nresults: ${await writeResults(outcome, verdict)}`);
  return verdict.goals.every((g) => g.met) ? 0 : 1;
}

main()
  .then(
    async (code) => {
      await cleanup();
      process.exit(code);
    },
    async (err: unknown) => {
      console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
      await cleanup();
      process.exit(2);
    },
  )
  .catch(() => process.exit(2));
