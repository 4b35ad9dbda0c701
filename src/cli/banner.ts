import path from "node:path";
import type { Config } from "../config.ts";
import type { Database } from "../runtime/database.ts";
import type { Service } from "../runtime/service.ts";

/**
 * What `npm start` and `social-ledger serve` print once the API listens. With an identity
 * provider (`jwks`), tokens come from it: `social-ledger token` would only say it cannot mint.
 */
export function serviceBanner(
  service: Pick<Service, "address" | "database" | "workers" | "metricsAddress">,
  jwks?: Config["jwks"],
  startup?: { ms: number; compiled: boolean },
): string {
  const { address, database } = service;
  const token = jwks
    ? `  tokens:    from the identity provider ${jwks.issuer} (aud ${jwks.audience.join(", ")}; keys: ${jwks.url})\n`
    : `  a token:   npx social-ledger token <userId> [--admin]   (then: curl -H "Authorization: Bearer <token>" ...)\n`;
  return (
    `social-ledger listening on ${address}\n` +
    `  API docs:  ${address}/docs   (OpenAPI: ${address}/openapi.json)\n` +
    `  dashboard: ${address}/dashboard   (asks for an admin token${jwks ? "" : ": npx social-ledger token root --admin"})\n` +
    `  database:  ${database.cluster ? `embedded PostgreSQL 16, data in ${database.cluster.dataDir}` : "DATABASE_URL"}\n` +
    `  consumers: ${service.workers.length > 0 ? "like counter, follower projector, comment counter and notifications in this process" : "none in this process (run `social-ledger worker`)"}\n` +
    (service.metricsAddress ? `  metrics:   ${service.metricsAddress}\n` : "") +
    token +
    (startup
      ? `  started:   in ${(startup.ms / 1000).toFixed(1)} s, ${startup.compiled ? "compiled JavaScript (npm run build)" : "TypeScript sources through tsx (production: npm run build, npm run start:prod)"}\n`
      : "")
  );
}

/** Which database a command uses: DATABASE_URL, or the embedded cluster it started or found running. */
export function describeDatabase(config: Config, database: Database): string {
  if (config.databaseUrl) return "DATABASE_URL";
  if (database.cluster) return `embedded PostgreSQL 16 (started by this process), data in ${database.cluster.dataDir}`;
  return `embedded PostgreSQL 16 (already running), data in ${path.join(config.dataDir, "pg")}`;
}
