/**
 * `npm run bench:http-cpu`: the server's CPU per HTTP request of the like path (PUT and DELETE
 * /v1/items/{id}/likes/me, GET /v1/items/{id}/like-count) next to the library's like and unlike,
 * measured in alternating rounds on one embedded PostgreSQL, and optionally a CPU profile of the
 * server thread for each kind (docs/write-path.md "The HTTP like path").
 *
 *   node --import tsx bench/http-cpu.ts [--requests n] [--rounds r] [--connections c] [--partitions p]
 *        [--log] [--profile DIR] [--compare CHECKOUT] [--sample-waits]
 *
 * The server and the library run on this process's main thread; the HTTP client runs in a worker
 * thread (bench/http-client.ts), so "server µs" is the main thread's CPU per request: fastify,
 * the auth, the handler and node-postgres, not the client. --log serves with the service's own
 * logger (info, one line per request, to stdout: run with `> /dev/null`), as `serve` does.
 * --profile writes DIR/<kind>.<round>.cpuprofile (the measured requests only); read them
 * with `node --import tsx bench/cpu-profile-top.ts DIR/http-like.*.cpuprofile`.
 * --compare serves the same requests also from another checkout's src/api/app.ts (the same
 * ledger and database, another port), its kinds taking turns with this one's: a before/after
 * of the HTTP layer measured in the same minutes of a shared machine (e.g. --compare /work/main).
 * --sample-waits also runs every kind with the write rows' pg_stat_activity sampler
 * (bench/wait-events.ts) on this thread, as bench/run.ts does: what it adds to the main
 * thread's CPU per operation.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { buildApp } from "../src/api/app.ts";
import { signToken } from "../src/api/auth.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { openLedger } from "../src/ledger.ts";
import { cleanup, started } from "./lifecycle.ts";
import { runFixedCount, runHttp, type Figures, type HttpRequestSpec } from "./load.ts";
import { sampleWaits } from "./wait-events.ts";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "1000" },
    rounds: { type: "string", default: "3" },
    connections: { type: "string", default: "16" },
    partitions: { type: "string", default: "4" },
    log: { type: "boolean", default: false },
    profile: { type: "string" },
    compare: { type: "string" },
    "sample-waits": { type: "boolean", default: false },
  },
});
const requests = Number(values.requests);
const rounds = Number(values.rounds);
const connections = Number(values.connections);
const partitions = Number(values.partitions);
const USERS = 1000;
const ITEMS = 101;
const user = (n: number) => `hu${n}`;
const item = (n: number) => `item-${n}`;

interface Kind {
  name: string;
  run: () => Promise<Figures>;
  sampleWaits?: boolean;
}

async function main(): Promise<void> {
  started.root = await clusterTempDir("social-ledger-http-cpu-");
  started.dataDir = path.join(started.root, "pgdata");
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir, settings: { max_connections: "100" } });
  started.cluster = await started.starting;
  started.admin = createPool({ connectionString: started.cluster.connectionString("postgres"), max: 1 });
  await started.admin.query("CREATE DATABASE bench_http");
  const pool = createPool({ connectionString: started.cluster.connectionString("bench_http"), max: connections + 4, applicationName: "social-ledger-http-cpu" });
  started.pools.push(pool);
  await migrate(pool);
  await initLedger(pool, { partitions });
  const ledger = await openLedger(pool);
  const secret = randomBytes(32);
  const builders: [label: string, build: typeof buildApp][] = [["", buildApp]];
  if (values.compare) builders.push(["compared ", ((await import(pathToFileURL(path.resolve(values.compare, "src/api/app.ts")).href)) as { buildApp: typeof buildApp }).buildApp]);
  const urls: [label: string, url: string][] = [];
  for (const [label, build] of builders) {
    const app = await build({
      ledger, jwtSecret: secret, logger: values.log ? { level: "info" } : false, writesPerMinute: 1_000_000_000, readsPerMinute: 1_000_000_000,
    });
    started.apps.push(app);
    urls.push([label, await app.listen({ port: 0, host: "127.0.0.1" })]);
  }
  for (let n = 0; n < ITEMS; n++) await ledger.likes.createItem(item(n));
  const auth: string[] = [];
  for (let n = 0; n < USERS; n++) auth.push(`Bearer ${await signToken(secret, user(n))}`);

  // Pair j is (user j, item j mod 101); a group likes pairs and then unlikes them, so every write is CHANGED and
  // every group leaves them unliked. A compared app likes with users of its own (pair j, user j + 500).
  const http = (url: string, users: number, method: HttpRequestSpec["method"], pathOf: (j: number) => string) =>
    runHttp({ url, amount: requests, connections, build: (k) => ({ method, path: pathOf(k % USERS), authorization: auth[(k + users) % USERS]! }) });
  const libUser = (n: number) => `lu${n}`;
  const groups: Kind[][] = [
    ...urls.flatMap(([label, url], n): Kind[][] => {
      const users = n * 500;
      return [[
        { name: `${label}http-like`, run: () => http(url, users, "PUT", (j) => `/v1/items/${item(j % ITEMS)}/likes/me`) },
        { name: `${label}http-unlike`, run: () => http(url, users, "DELETE", (j) => `/v1/items/${item(j % ITEMS)}/likes/me`) },
      ], [
        { name: `${label}http-count`, run: () => http(url, users, "GET", (j) => `/v1/items/${item(j % ITEMS)}/like-count`) },
      ]];
    }),
    [
      { name: "library-like", run: () => runFixedCount(requests, connections, (k) => ledger.likes.like(libUser(k % USERS), item((k % USERS) % ITEMS))) },
      { name: "library-unlike", run: () => runFixedCount(requests, connections, (k) => ledger.likes.unlike(libUser(k % USERS), item((k % USERS) % ITEMS))) },
    ],
  ];
  // With --sample-waits every group runs twice per round, once with the sampler.
  if (values["sample-waits"]) groups.push(...groups.map((group) => group.map((k) => ({ ...k, name: `${k.name} +waits`, sampleWaits: true }))));
  const kinds = groups.flat();
  // Warm-up: JIT, pools, plan caches (a round of every kind, not reported).
  for (const kind of kinds) await kind.run();

  const session = values.profile ? new Session() : undefined;
  if (session) {
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.setSamplingInterval", { interval: 100 });
    mkdirSync(values.profile!, { recursive: true });
  }
  const results = new Map<string, Figures[]>(kinds.map((k) => [k.name, []]));
  // Group commit's batches and writes per kind: a kind whose writes arrive more spread out forms smaller batches.
  const batched = new Map<string, [batches: number, writes: number]>();
  // How often the main thread went to sleep (waited in epoll for a socket) per operation: each
  // time it wakes again its caches are cold, the kernel switches it in, and libuv runs a turn.
  const sleeps = new Map<string, number>();
  for (let r = 0; r < rounds; r++) {
    // The order of the groups rotates each round, so no kind always follows the same one.
    for (const kind of groups.map((_, n) => groups[(n + r) % groups.length]!).flat()) {
      if (session) await session.post("Profiler.start");
      const waits = kind.sampleWaits ? sampleWaits(started.admin, "bench_http", "social-ledger-http-cpu") : undefined;
      const batches0 = ledger.likes.batchStats();
      const switches0 = contextSwitches();
      const figures = await kind.run();
      const switches1 = contextSwitches();
      const batches1 = ledger.likes.batchStats();
      if (switches0 !== undefined && switches1 !== undefined) sleeps.set(kind.name, (sleeps.get(kind.name) ?? 0) + switches1 - switches0);
      if (batches0 && batches1) batched.set(kind.name, [(batched.get(kind.name)?.[0] ?? 0) + batches1.batches - batches0.batches, (batched.get(kind.name)?.[1] ?? 0) + batches1.writes - batches0.writes]);
      await waits?.stop();
      if (session) {
        const { profile } = await session.post("Profiler.stop");
        writeFileSync(path.join(values.profile!, `${kind.name}.${r}.cpuprofile`), JSON.stringify(profile));
      }
      results.get(kind.name)!.push(figures);
      if (figures.errors > 0 || Object.keys(figures.statusCodes ?? {}).length > 0) {
        process.stderr.write(`${kind.name}: ${figures.errors} errors, statuses ${JSON.stringify(figures.statusCodes)} ${figures.firstError ?? ""}\n`);
      }
    }
  }
  const cpu = (runs: Figures[]) => runs.reduce((a, f) => a + (f.mainCpuUsPerOp ?? Number.NaN) * f.ops, 0) / runs.reduce((a, f) => a + f.ops, 0);
  const rate = (runs: Figures[]) => runs.reduce((a, f) => a + f.ops, 0) / runs.reduce((a, f) => a + f.seconds, 0);
  process.stderr.write(`\nhttp-cpu: ${rounds} rounds x ${requests} per kind, ${connections} connections/workers, P = ${partitions}, logger ${values.log ? "info" : "off"}${values["sample-waits"] ? ", wait sampler on" : ""}, load ${os.loadavg()[0]!.toFixed(1)}\n`);
  process.stderr.write(`${"kind".padEnd(26)}${"ops/s".padStart(8)}${"main µs/op".padStart(12)}${"client µs/op".padStart(14)}${"writes/batch".padStart(14)}${"sleeps/op".padStart(11)}\n`);
  for (const [name, runs] of results) {
    const client = runs.every((f) => f.clientCpuUsPerOp !== undefined) ? runs.reduce((a, f) => a + f.clientCpuUsPerOp! * f.ops, 0) / runs.reduce((a, f) => a + f.ops, 0) : Number.NaN;
    const [batches, writes] = batched.get(name) ?? [0, 0];
    process.stderr.write(`${name.padEnd(26)}${rate(runs).toFixed(0).padStart(8)}${cpu(runs).toFixed(0).padStart(12)}${(Number.isNaN(client) ? "" : client.toFixed(0)).padStart(14)}${(batches > 0 ? (writes / batches).toFixed(1) : "").padStart(14)}${(sleeps.has(name) ? (sleeps.get(name)! / runs.reduce((a, f) => a + f.ops, 0)).toFixed(2) : "").padStart(11)}\n`);
  }
  // The machine's load moves from round to round far more than a change moves the CPU per
  // request: each round's own ratio of this app's CPU per request to the compared one's (both
  // served in the same minutes), and their median, resolve what the sums above cannot.
  if (urls.length > 1) {
    for (const kind of ["http-like", "http-unlike", "http-count"]) {
      const ratios = results.get(kind)!.map((f, r) => f.mainCpuUsPerOp! / results.get(`compared ${kind}`)![r]!.mainCpuUsPerOp!);
      const sorted = [...ratios].sort((a, b) => a - b);
      const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2]! : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2;
      process.stderr.write(`${kind} main CPU/op ÷ compared, per round: ${ratios.map((x) => x.toFixed(2)).join(" ")}; median ${median.toFixed(2)}\n`);
    }
  }
  for (const suffix of values["sample-waits"] ? ["", " +waits"] : [""]) {
    const lib = results.get(`library-like${suffix}`)!.concat(results.get(`library-unlike${suffix}`)!);
    for (const [label] of urls) {
      const writes = results.get(`${label}http-like${suffix}`)!.concat(results.get(`${label}http-unlike${suffix}`)!);
      process.stderr.write(`${label}HTTP like+unlike ÷ library like+unlike${suffix}: ops/s ${(rate(writes) / rate(lib)).toFixed(2)}, main CPU/op ${(cpu(writes) / cpu(lib)).toFixed(2)}\n`);
    }
  }
}

/** The main thread's voluntary context switches so far (Linux /proc), or undefined. */
function contextSwitches(): number | undefined {
  try {
    const line = /^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync("/proc/thread-self/status", "utf8"));
    return line ? Number(line[1]) : undefined;
  } catch {
    return undefined;
  }
}

main()
  .catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await cleanup();
    process.exit();
  });
