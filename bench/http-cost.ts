/**
 * `npm run bench:http-cost`: what an HTTP like costs the server's main thread, piece by piece. The
 * service's app serves `PUT /v1/items/{id}/likes/me` at C keep-alive connections (default 256)
 * with the write answered after one `SELECT 1` round trip (`--write select1`, the default), at
 * once (`--write constant`) or by the real write (`--write real`), so the HTTP layer is measured
 * without the write's noise. Each round serves the same requests once per variant, taking turns:
 * the app as the service runs it (pino at info into a null stream), and the app with one piece
 * off (the request log, the HTTP metrics and the dashboard's recorder, the outcome counter, the
 * rate limits' store, the token cache's check), next to a bare fastify route and node's own http
 * server with the same answer (after the same round trip, or none with constant; never the real
 * write) as floors. Prints each variant's main-thread CPU µs per request
 * (median over rounds) and its ratio to the whole app in the same rounds.
 *
 *   node --import tsx bench/http-cost.ts [--connections C] [--seconds s] [--rounds r]
 *        [--write select1|constant|real] [--partitions P] [--consumers] [--profile DIR]
 *
 * --consumers runs the service's consumer loops in the process (createWorkers), as `serve` does.
 *
 * Only for measuring: pieces are switched off by replacing methods in this process (the code the
 * service runs is unchanged); --profile writes one V8 CPU profile of the whole app per round.
 */
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import http from "node:http";
import { mkdirSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import Fastify from "fastify";
import { buildApp } from "../src/api/app.ts";
import { TokenVerifier, signToken } from "../src/api/auth.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { createWorkers, openLedger } from "../src/ledger.ts";
import type { LikeResult } from "../src/likes/types.ts";
import { cleanup, started } from "./lifecycle.ts";
import { percentile, runHttp, type HttpRequestSpec } from "./load.ts";

const { values } = parseArgs({
  options: {
    connections: { type: "string", default: "256" },
    seconds: { type: "string", default: "2" },
    rounds: { type: "string", default: "5" },
    write: { type: "string", default: "select1" },
    partitions: { type: "string", default: "1" },
    consumers: { type: "boolean", default: false },
    profile: { type: "string" },
  },
});
const connections = Number(values.connections);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const USERS = 2048;

const LocalStore = createRequire(import.meta.url)("@fastify/rate-limit/store/LocalStore.js") as {
  prototype: { incr: (...args: unknown[]) => void };
};

/** A piece of the request path and how to switch it off in this process (returns the undo). */
interface Piece {
  name: string;
  off: (app: Awaited<ReturnType<typeof buildApp>>) => () => void;
}

function replace<T extends object, K extends keyof T>(target: T, key: K, value: T[K]): () => void {
  const before = target[key];
  target[key] = value;
  return () => void (target[key] = before);
}

const PIECES: Piece[] = [
  {
    name: "request log (pino at info)",
    off: (app) => {
      const log = app.log as unknown as { level: string };
      const before = log.level;
      log.level = "warn";
      return () => void (log.level = before);
    },
  },
  {
    name: "HTTP metrics + dashboard recorder",
    off: (app) => {
      const undo = [
        replace(app.metrics.http, "record", () => undefined),
        replace(app.dashboard, "recordRequest", () => undefined),
      ];
      return () => undo.forEach((u) => u());
    },
  },
  { name: "outcome counter", off: (app) => replace(app.metrics.outcomes, "inc", () => undefined) },
  {
    name: "rate-limit store",
    off: () =>
      replace(LocalStore.prototype, "incr", (...args: unknown[]) =>
        (args[1] as (err: null, r: { current: number; ttl: number }) => void)(null, { current: 1, ttl: 60_000 }),
      ),
  },
  {
    name: "token cache check",
    off: () => {
      const caller = new Map<string, { id: string; admin: boolean }>();
      const proto = TokenVerifier.prototype as unknown as { remembered: (h: string | undefined) => unknown };
      const real = proto.remembered;
      return replace(proto, "remembered", function (this: TokenVerifier, header: string | undefined) {
        const known = header === undefined ? undefined : caller.get(header);
        if (known) return known;
        const found = real.call(this, header) as { id: string; admin: boolean } | undefined;
        if (found && header) caller.set(header, found);
        return found;
      });
    },
  },
];

async function main(): Promise<void> {
  started.root = await clusterTempDir("social-ledger-http-cost-");
  started.dataDir = path.join(started.root, "pgdata");
  started.starting = EmbeddedCluster.start({ dataDir: started.dataDir, settings: { max_connections: "100" } });
  started.cluster = await started.starting;
  started.admin = createPool({ connectionString: started.cluster.connectionString("postgres"), max: 1 });
  await started.admin.query("CREATE DATABASE bench_http_cost");
  const pool = createPool({ connectionString: started.cluster.connectionString("bench_http_cost"), max: 20 });
  started.pools.push(pool);
  await migrate(pool);
  await initLedger(pool, { partitions: Number(values.partitions) });
  const ledger = await openLedger(pool);
  for (let n = 0; n < 101; n++) await ledger.likes.createItem(`item-${n}`);
  const answer: LikeResult = { outcome: "CHANGED", liked: true, version: 1, seq: 1, part: 0, reason: "liked" };
  if (!["select1", "constant", "real"].includes(values.write)) throw new Error("--write is select1, constant or real");
  // The floors (bare fastify, node http) wait for the same round trip, or for none with --write constant.
  const roundTrip = async () => {
    if (values.write !== "constant") await pool.query({ name: "bench_http_cost_select1", text: "SELECT 1 AS one" });
  };
  if (values.write !== "real") {
    ledger.likes.setLikedIfVisible = async () => {
      await roundTrip();
      return answer;
    };
  }
  const secret = randomBytes(32);
  const nullStream = new Writable({ write: (_chunk, _encoding, done) => done() });
  const app = await buildApp({
    ledger,
    jwtSecret: secret,
    logger: { level: "info", stream: nullStream } as unknown as { level: string },
    writesPerMinute: 1e9,
    readsPerMinute: 1e9,
  });
  started.apps.push(app);
  const appUrl = await app.listen({ port: 0, host: "127.0.0.1", backlog: 2048 });
  const body = JSON.stringify({ outcome: "CHANGED", liked: true, version: 1, seq: 1 });
  const bare = Fastify();
  bare.route({
    method: ["PUT", "DELETE"],
    url: "/v1/items/:id/likes/me",
    handler: async (_request, reply) => {
      await roundTrip();
      return reply.type("application/json; charset=utf-8").send(body);
    },
  });
  started.apps.push(bare);
  const bareUrl = await bare.listen({ port: 0, host: "127.0.0.1", backlog: 2048 });
  const node = http.createServer((_req, res) => {
    void roundTrip().then(() => {
      res.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": body.length });
      res.end(body);
    });
  });
  node.keepAliveTimeout = 72_000;
  await new Promise<void>((resolve) => node.listen({ port: 0, host: "127.0.0.1", backlog: 2048 }, resolve));
  const nodeUrl = `http://127.0.0.1:${(node.address() as { port: number }).port}`;

  const auth = await Promise.all(
    Array.from({ length: USERS }, async (_, n) => `Bearer ${await signToken(secret, `hc${n}`)}`),
  );
  // Toggles like and unlike of distinct pairs, as the bench's HTTP rows (the real write stays CHANGED).
  const build = (k: number): HttpRequestSpec => {
    const j = k % USERS;
    const set = Math.floor(k / USERS) % 2 === 0;
    return { method: set ? "PUT" : "DELETE", path: `/v1/items/item-${j % 101}/likes/me`, authorization: auth[j]! };
  };
  let position = 0;
  const serve = async (url: string) => {
    const f = await runHttp({ url, seconds, cycle: 2 * USERS, first: position % (2 * USERS), connections, build });
    position += f.ops;
    return f;
  };
  process.stderr.write(`warming up (every token verified once), load ${os.loadavg()[0]!.toFixed(1)}\n`);
  await runHttp({ url: appUrl, amount: 2 * USERS, connections: 64, build });
  await serve(bareUrl);
  await serve(nodeUrl);

  const workers = values.consumers ? createWorkers(ledger, { idleMs: 20 }) : [];
  for (const w of workers) w.start();
  const variants = [
    { name: "the app (as the service runs it)", url: appUrl, off: undefined as Piece | undefined },
    ...PIECES.map((p) => ({ name: `the app without ${p.name}`, url: appUrl, off: p })),
    { name: "bare fastify, one route", url: bareUrl, off: undefined },
    { name: "node http", url: nodeUrl, off: undefined },
  ];
  const perRound = variants.map(() => [] as number[]);
  const rates = variants.map(() => [] as number[]);
  const session = values.profile ? new Session() : undefined;
  if (session && values.profile) {
    session.connect();
    mkdirSync(values.profile, { recursive: true });
    await session.post("Profiler.enable");
  }
  for (let r = 0; r < rounds; r++) {
    for (let n = 0; n < variants.length; n++) {
      const i = (n + r) % variants.length;
      const v = variants[i]!;
      const undo = v.off?.off(app);
      const profiling = session && i === 0;
      if (profiling) await session.post("Profiler.start");
      try {
        const f = await serve(v.url);
        if (f.errors > 0 || Object.keys(f.statusCodes ?? {}).length > 0)
          throw new Error(
            `${v.name}: ${f.errors} errors, statuses ${JSON.stringify(f.statusCodes)} ${f.firstError ?? ""}`,
          );
        perRound[i]!.push(f.mainCpuUsPerOp ?? Number.NaN);
        rates[i]!.push(f.opsPerSec);
      } finally {
        undo?.();
        if (profiling) {
          const { profile } = await session.post("Profiler.stop");
          writeFileSync(path.join(values.profile!, `app.${r}.cpuprofile`), JSON.stringify(profile));
        }
      }
    }
  }
  for (const w of workers) await w.stop();
  const median = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 50);
  process.stdout.write(
    `\nserver main-thread CPU per like request, ${connections} connections, ${rounds} rounds of ${seconds} s per variant, write: ${values.write}\n` +
      `(median over rounds; ratio: median of each round's ratio to the whole app's; load ${os.loadavg()[0]!.toFixed(1)}, a shared 2-core machine)\n`,
  );
  for (let i = 0; i < variants.length; i++) {
    const ratio = median(perRound[i]!.map((x, r) => x / perRound[0]![r]!));
    process.stdout.write(
      `  ${variants[i]!.name.padEnd(60)} ${median(perRound[i]!).toFixed(1).padStart(7)} µs  ${ratio.toFixed(3)}  ${Math.round(median(rates[i]!))} req/s\n`,
    );
  }
  await new Promise<void>((resolve) => node.close(() => resolve()));
}

try {
  await main();
} catch (err) {
  process.stderr.write(`http-cost failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
process.exit(process.exitCode ?? 0);
