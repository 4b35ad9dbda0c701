import type { FastifyInstance } from "fastify";
import { migrationStatus } from "../../db/migrate.ts";
import { databaseUnavailable, errorBody } from "../errors.ts";
import { errorSchema, named } from "../schemas.ts";

/** What the process knows of its database without asking it (supervision of an embedded cluster). */
export interface DatabaseHealth {
  /** embedded: this process runs the cluster; embedded-shared: another of our processes does; external: DATABASE_URL. */
  kind: "embedded" | "embedded-shared" | "external";
  /** up, restarting (an embedded cluster this process runs died and is being restarted), failed (restarts gave up). */
  state: "up" | "restarting" | "failed";
  since: string;
  restarts: number;
  lastExit: string | undefined;
}

const databaseHealthSchema = named("DatabaseHealth", {
  type: "object",
  required: ["kind", "state", "since", "restarts"],
  properties: {
    kind: { type: "string", enum: ["embedded", "embedded-shared", "external"] },
    state: { type: "string", enum: ["up", "restarting", "failed"] },
    since: { type: "string", format: "date-time" },
    restarts: { type: "integer" },
    lastExit: { type: "string", description: "how the embedded PostgreSQL last exited; absent until it did" },
  },
});
const liveness = named("Liveness", {
  type: "object",
  required: ["status"],
  // database: absent only in an app built without a database supervisor (tests); serve always has one.
  properties: { status: { type: "string", enum: ["ok"] }, database: databaseHealthSchema },
});
const notLive = named("LivenessError", {
  ...errorSchema,
  required: [...errorSchema.required, "database"],
  properties: { ...errorSchema.properties, database: databaseHealthSchema },
});
const readiness = named("Readiness", {
  type: "object",
  required: ["status", "migrations", "counts"],
  properties: {
    status: { type: "string" },
    migrations: { type: "integer" },
    counts: { type: "string", enum: ["off", "up", "degraded"] },
  },
});

/**
 * Liveness and readiness, as Kubernetes and systemd users expect them (docs/service.md):
 * - /healthz (liveness) does not touch the database: a database outage is not cured by
 *   restarting this process, and a liveness probe that fails with the database would restart
 *   every replica at once. It fails only when this process cannot recover by itself: the
 *   embedded cluster it runs died and its restarts gave up (the process is then exiting non-zero).
 * - /readyz (readiness) asks the database: 503 DATABASE_UNAVAILABLE with Retry-After while it
 *   is down, restarting or recovering, 503 NOT_READY while migrations are behind.
 */
export async function healthRoutes(
  app: FastifyInstance,
  opts: { databaseHealth?: () => DatabaseHealth; countsState: () => "off" | "up" | "degraded" },
): Promise<void> {
  const { ledger } = app;
  const health = opts.databaseHealth;

  app.get(
    "/healthz",
    {
      config: { auth: "none" },
      schema: {
        tags: ["health"],
        summary: "Liveness: the process serves requests and can recover by itself",
        response: {
          200: liveness,
          503: notLive,
        },
      },
    },
    async (_request, reply) => {
      const database = health?.();
      if (database?.state === "failed") {
        return reply.status(503).send({
          ...errorBody(
            "NOT_LIVE",
            `the embedded PostgreSQL could not be restarted (${database.lastExit ?? "unknown exit"}); the process is exiting`,
          ),
          database,
        });
      }
      return database ? { status: "ok", database } : { status: "ok" };
    },
  );

  app.get(
    "/readyz",
    {
      config: { auth: "none" },
      schema: {
        tags: ["health"],
        summary: "Readiness: the database answers and its migrations are current",
        response: { 200: readiness, 503: { $ref: "LedgerError#" } },
      },
    },
    async (_request, reply) => {
      if (health && health().state !== "up") return databaseUnavailable(reply);
      let status;
      try {
        status = await migrationStatus(ledger.pool);
      } catch {
        return databaseUnavailable(reply);
      }
      if (status.applied < status.latest)
        return reply.status(503).send(errorBody("NOT_READY", `migrations ${status.applied}/${status.latest} applied`));
      // Redis down does not make the service unready: counts come from PostgreSQL meanwhile.
      return { status: "ready", migrations: status.applied, counts: opts.countsState() };
    },
  );
}
