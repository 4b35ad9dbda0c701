/** One benchmark database: its pool, ledger and HTTP app on the bench's cluster, with the items, accounts and tokens of the workload. */
import { randomBytes } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../src/api/app.ts";
import { signToken } from "../src/api/auth.ts";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { LikeService } from "../src/likes/like-service.ts";
import { RelationService } from "../src/relations/relation-service.ts";
import { createRawInsertTable } from "./baselines.ts";
import { started } from "./lifecycle.ts";
import { BENCH_APPLICATION, HOT_ITEM, ITEMS, USERS, item } from "./options.ts";

export interface Target {
  partitions: number;
  database: string;
  pool: Pool;
  ledger: Ledger;
  /** The same database's likes with LEDGER_WRITE_BATCH_MAX = 1: one like_set call per write (issue 22's side by side). */
  likesUnbatched: LikeService;
  /** The same database's follows with LEDGER_WRITE_BATCH_MAX = 1: one relation_follow / relation_unfollow call per write. */
  relationsUnbatched: RelationService;
  app: FastifyInstance;
  baseUrl: string;
  /** Bearer header of httpUser(n). */
  auth: string[];
  jwtSecret: Uint8Array;
}

export async function openTarget(
  cluster: EmbeddedCluster,
  partitions: number,
  poolSize: number,
  httpTokens: string[],
  options: { database?: string; accounts?: number } = {},
): Promise<Target> {
  const database = options.database ?? `bench_p${partitions}`;
  await started.admin!.query(`CREATE DATABASE ${database}`);
  const pool = createPool({
    connectionString: cluster.connectionString(database),
    max: poolSize,
    applicationName: BENCH_APPLICATION,
  });
  started.pools.push(pool);
  await migrate(pool);
  await initLedger(pool, { partitions });
  const ledger = await openLedger(pool);
  const secret = randomBytes(32);
  const app = await buildApp({
    ledger,
    jwtSecret: secret,
    logger: false,
    writesPerMinute: 1_000_000_000,
    readsPerMinute: 1_000_000_000,
  });
  started.apps.push(app);
  const target: Target = {
    partitions,
    database,
    pool,
    ledger,
    likesUnbatched: await LikeService.open(pool, { batchMax: 1 }),
    relationsUnbatched: await RelationService.open(pool, { batchMax: 1 }),
    app,
    // The concurrency sweep opens up to 1024 connections at once: above node's default backlog (511).
    baseUrl: await app.listen({ port: 0, host: "127.0.0.1", backlog: 2048 }),
    auth: [],
    jwtSecret: secret,
  };
  for (let n = 0; n < ITEMS; n++) await ledger.likes.createItem(item(n));
  await ledger.likes.createItem(HOT_ITEM);
  for (let n = 0; n < 8; n++) await ledger.likes.createItem(`warm-${n}`);
  await createRawInsertTable(pool);
  await pool.query("INSERT INTO account (account_id) SELECT 'acct' || n FROM generate_series(0, $1::int - 1) AS n", [
    options.accounts ?? USERS,
  ]);
  for (let n = 0; n < httpTokens.length; n++) target.auth.push(`Bearer ${await signToken(secret, httpTokens[n]!)}`);
  return target;
}

export async function eventsWritten(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM like_seq");
  return rows[0]!.n;
}
