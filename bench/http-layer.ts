/**
 * `node --import tsx bench/http-layer.ts`: the main thread's CPU per HTTP like of the service's
 * app with the like's write answered at once (`--write constant`) or after a `SELECT 1` round
 * trip to PostgreSQL (`--write select1`, the write path's wake pattern without its work), so the
 * HTTP layer's own cost (fastify, node's HTTP, our hooks, auth, budgets, metrics) is measured
 * without the database's noise (docs/write-path.md "The HTTP like path").
 *
 *   node --import tsx bench/http-layer.ts [--requests n] [--rounds r] [--write constant|select1]
 *        [--compare CHECKOUT] [--bare] [--profile DIR]
 *
 * --compare serves the same requests from another checkout's app too (same rounds, taking
 * turns) and prints each round's CPU ratio and their median; --bare adds a bare fastify with one
 * route and node's own http server answering the same body, and the library loop of the same
 * write (16 workers), as floors; --profile writes DIR/<variant>.<round>.cpuprofile. Only for
 * measuring: the ledger's setLikedIfVisible is replaced in this process.
 */
import { randomBytes } from "node:crypto";
import http from "node:http";
import { mkdirSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import Fastify from "fastify";
import { buildApp } from "../src/api/app.ts";
import { signToken } from "../src/api/auth.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { openLedger } from "../src/ledger.ts";
import { cleanup, started } from "./lifecycle.ts";
import { runFixedCount, runHttp, type Figures } from "./load.ts";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "3000" },
    rounds: { type: "string", default: "8" },
    write: { type: "string", default: "select1" },
    compare: { type: "string" },
    bare: { type: "boolean", default: false },
    profile: { type: "string" },
  },
});
const requests = Number(values.requests);
const rounds = Number(values.rounds);
const CONNECTIONS = 16;

async function main(): Promise<void> {
  if (values.write !== "constant" && values.write !== "select1") throw new Error("--write is constant or select1");
  started.root = await clusterTempDir("social-ledger-http-layer-");
  started.dataDir = path.join(started.root, "pgdata");
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir });
  started.cluster = await started.starting;
  started.admin = createPool({ connectionString: started.cluster.connectionString("postgres"), max: 1 });
  await started.admin.query("CREATE DATABASE bench_http_layer");
  const pool = createPool({ connectionString: started.cluster.connectionString("bench_http_layer"), max: CONNECTIONS + 4 });
  started.pools.push(pool);
  await migrate(pool);
  await initLedger(pool, { partitions: 4 });
  const ledger = await openLedger(pool);
  const answer = { outcome: "CHANGED", liked: true, version: 1, seq: "1" };
  const write = values.write === "select1"
    ? async () => {
      await pool.query({ name: "bench_http_layer_select1", text: "SELECT 1 AS one" });
      return answer;
    }
    : async () => answer;
  (ledger.likes as unknown as { setLikedIfVisible: typeof write }).setLikedIfVisible = write;
  const secret = randomBytes(32);
  const variants: [label: string, url: string][] = [];
  const builders: [label: string, build: typeof buildApp][] = [["app", buildApp]];
  if (values.compare) builders.push(["compared", ((await import(pathToFileURL(path.resolve(values.compare, "src/api/app.ts")).href)) as { buildApp: typeof buildApp }).buildApp]);
  for (const [label, build] of builders) {
    const app = await build({ ledger, jwtSecret: secret, logger: false, writesPerMinute: 1e9, readsPerMinute: 1e9 });
    started.apps.push(app);
    variants.push([label, await app.listen({ port: 0, host: "127.0.0.1" })]);
  }
  if (values.bare) {
    const bare = Fastify({ logger: false });
    const schema = { response: { 200: { type: "object", properties: { outcome: { type: "string" }, liked: { type: "boolean" }, version: { type: "integer" }, seq: { type: "string" } } } } };
    bare.put("/v1/items/:id/likes/me", { schema }, write);
    started.apps.push(bare);
    variants.push(["bare fastify", await bare.listen({ port: 0, host: "127.0.0.1" })]);
    const body = JSON.stringify(answer);
    const server = http.createServer((request, response) => {
      request.resume();
      void write().then(() => {
        response.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(body) });
        response.end(body);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    server.unref();
    variants.push(["node http", `http://127.0.0.1:${(server.address() as { port: number }).port}`]);
  }
  const auth: string[] = [];
  for (let n = 0; n < 1000; n++) auth.push(`Bearer ${await signToken(secret, `u${n}`)}`);
  const kinds: [label: string, run: () => Promise<Figures>][] = variants.map(([label, url]) => [label, () => runHttp({
    url, amount: requests, connections: CONNECTIONS, build: (k) => ({ method: "PUT", path: `/v1/items/item-${k % 101}/likes/me`, authorization: auth[k % 1000]! }),
  })]);
  if (values.bare) kinds.push(["library", () => runFixedCount(requests, CONNECTIONS, () => write())]);
  for (const [, run] of kinds) await run(); // warm-up: JIT, connections, plans

  const session = values.profile ? new Session() : undefined;
  if (session) {
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.setSamplingInterval", { interval: 100 });
    mkdirSync(values.profile!, { recursive: true });
  }
  const results = new Map<string, Figures[]>(kinds.map(([label]) => [label, []]));
  for (let r = 0; r < rounds; r++) {
    // The order rotates each round, so no variant always follows the same one.
    for (let i = 0; i < kinds.length; i++) {
      const [label, run] = kinds[(i + r) % kinds.length]!;
      if (session) await session.post("Profiler.start");
      const figures = await run();
      if (session) {
        const { profile } = await session.post("Profiler.stop");
        writeFileSync(path.join(values.profile!, `${label.replace(/ /g, "-")}.${r}.cpuprofile`), JSON.stringify(profile));
      }
      if (figures.errors > 0 || Object.keys(figures.statusCodes ?? {}).length > 0) process.stderr.write(`${label}: ${figures.errors} errors, statuses ${JSON.stringify(figures.statusCodes)} ${figures.firstError ?? ""}\n`);
      results.get(label)!.push(figures);
    }
  }
  process.stderr.write(`\nhttp-layer: ${rounds} rounds x ${requests} PUT likes, write ${values.write}, ${CONNECTIONS} connections, load ${os.loadavg()[0]!.toFixed(1)}\n`);
  for (const [label, runs] of results) {
    const ops = runs.reduce((a, f) => a + f.ops, 0);
    const cpu = runs.reduce((a, f) => a + f.mainCpuUsPerOp! * f.ops, 0) / ops;
    process.stderr.write(`${label.padEnd(14)}${(ops / runs.reduce((a, f) => a + f.seconds, 0)).toFixed(0).padStart(8)}/s${cpu.toFixed(1).padStart(8)} µs/op main  (rounds: ${runs.map((f) => f.mainCpuUsPerOp!.toFixed(0)).join(" ")})\n`);
  }
  const compared = results.get("compared");
  if (compared) {
    const ratios = results.get("app")!.map((f, r) => f.mainCpuUsPerOp! / compared[r]!.mainCpuUsPerOp!).sort((a, b) => a - b);
    const median = (ratios[(ratios.length - 1) >> 1]! + ratios[ratios.length >> 1]!) / 2;
    process.stderr.write(`app ÷ compared main CPU/op, per round (sorted): ${ratios.map((x) => x.toFixed(2)).join(" ")}; median ${median.toFixed(3)}\n`);
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
