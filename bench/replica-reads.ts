/**
 * Reads on a streaming replica for `npm run bench` (issue 14 part 2): a hot standby of the
 * benchmark cluster (support/standby.ts), then count reads and likers pages on the primary
 * and on the replica side by side, through the library and through HTTP with the replica router,
 * and the cost of presenting a freshness token the replica has already replayed.
 */
import path from "node:path";
import { buildApp } from "../src/api/app.ts";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import type { Ledger } from "../src/ledger.ts";
import { listLikers } from "../src/likes/like-reads.ts";
import { ReplicaRouter } from "../src/replicas/replica-router.ts";
import { readFreshnessToken } from "../src/replicas/wal-position.ts";
import { TestStandby } from "../support/standby.ts";
import { runHttp, runFixedCount, type Figures } from "./load.ts";

export interface ReplicaReadRow {
  op: string;
  path: "library" | "HTTP";
  figures: Figures;
  note: string;
}

/** One standby for the whole run (it replicates every database of the cluster); stop() at the end. */
export class ReplicaBench {
  private standby: Promise<TestStandby> | undefined;

  constructor(
    private readonly cluster: EmbeddedCluster,
    private readonly dir: string,
    private readonly settings: Record<string, string>,
  ) {}

  private started(): Promise<TestStandby> {
    this.standby ??= TestStandby.fromPrimary(this.cluster, {
      dataDir: path.join(this.dir, "standby"),
      name: "bench_standby",
      settings: this.settings,
    });
    return this.standby;
  }

  async stop(): Promise<void> {
    const standby = await this.standby?.catch(() => undefined);
    await standby?.stop();
  }

  async rows(
    target: { database: string; pool: Pool; ledger: Ledger; jwtSecret: Uint8Array; baseUrl: string },
    o: {
      reads: number;
      requests: number;
      workers: number;
      connections: number;
      items: readonly string[];
      authorization: string;
    },
    signal?: AbortSignal,
  ): Promise<ReplicaReadRow[]> {
    const standby = await this.started();
    await standby.catchUp();
    const replica = createPool({
      connectionString: standby.connectionString(target.database),
      max: o.workers + 4,
      applicationName: "social-ledger-bench-replica",
    });
    const router = new ReplicaRouter(target.pool, [{ name: "replica-0", pool: replica }], {
      maxLagMs: 5_000,
      tokenWaitMs: 100,
      checkEveryMs: 1_000,
    });
    await router.start();
    const app = await buildApp({
      ledger: target.ledger,
      jwtSecret: target.jwtSecret,
      logger: false,
      readsPerMinute: 1_000_000_000,
      replicas: router,
    });
    try {
      const url = await app.listen({ port: 0, host: "127.0.0.1" });
      const item = (k: number) => o.items[k % o.items.length]!;
      // A token every replica has replayed: what a client presents some time after its write.
      const token = await readFreshnessToken(target.pool);
      await standby.catchUp();
      const count = (pool: Pool) => (k: number) => LIKE_COUNTS.readDatabase(pool, item(k), 16);
      const library = (op: string, run: (k: number) => Promise<unknown>, note: string) =>
        runFixedCount(o.reads, o.workers, run, signal).then((figures): ReplicaReadRow => ({
          op,
          path: "library",
          figures,
          note,
        }));
      const http = (op: string, base: string, note: string) =>
        runHttp({
          url: base,
          amount: o.requests,
          connections: o.connections,
          build: (k) => ({ method: "GET", path: `/v1/items/${item(k)}/like-count`, authorization: o.authorization }),
        }).then((figures): ReplicaReadRow => ({ op, path: "HTTP", figures, note }));
      const rows: ReplicaReadRow[] = [];
      // Primary and replica take turns (A B B A), so neither always meets a warmer machine.
      rows.push(await library("count read (primary)", count(target.pool), `${o.items.length} items`));
      rows.push(
        await library(
          "count read (replica)",
          count(replica),
          `${o.items.length} items, hot standby on the same machine`,
        ),
      );
      rows.push(
        await library(
          "count read (routed, token)",
          (k) => router.read(token, (pool) => count(pool)(k)),
          "token already replayed: the replica answers",
        ),
      );
      rows.push(
        await library("likers page (replica)", (k) => listLikers(replica, item(k), { limit: 20 }), "20 per page"),
      );
      rows.push(
        await library("likers page (primary)", (k) => listLikers(target.pool, item(k), { limit: 20 }), "20 per page"),
      );
      // The benchmark's own app has no router: every read there is on the primary. The routed app
      // is new: a warm-up (not reported) first, as the benchmark's own app had one.
      await http("warm-up", url, "");
      const routedNote = () =>
        `DATABASE_REPLICA_URLS set, no token, replica lag ${router.state("replica-0")?.lagMs ?? "?"} ms at the last check`;
      rows.push(await http("GET like-count (primary)", target.baseUrl, "no replicas configured"));
      rows.push(await http("GET like-count (routed: replica)", url, routedNote()));
      rows.push(await http("GET like-count (routed: replica)", url, routedNote()));
      rows.push(await http("GET like-count (primary)", target.baseUrl, "no replicas configured"));
      return rows;
    } finally {
      await app.close();
      await router.stop();
    }
  }
}
