import type { FastifyInstance, FastifyRequest, RouteOptions } from "fastify";
import fp from "fastify-plugin";
import type { Pool } from "../db/pool.ts";
import type { ReplicaRouter } from "../replicas/replica-router.ts";
import {
  formatFreshnessToken,
  parseFreshnessToken,
  readFreshnessToken,
  type FreshnessToken,
} from "../replicas/wal-position.ts";
import { freshnessField, FRESHNESS_TOKEN_PATTERN } from "./schemas.ts";

/** The header a write answers its freshness token in, and a read presents it in. */
export const FRESHNESS_HEADER = "x-ledger-freshness";
/** The server that answered a routed read: "primary" or a replica's name (only with replicas). */
export const READ_FROM_HEADER = "x-ledger-read-from";
/** On a routed read whose token was not honoured as asked: "lost" or "unverifiable" (docs/failover.md). */
export const FRESHNESS_STATUS_HEADER = "x-ledger-freshness-status";

const WRITE_METHODS = new Set(["PUT", "POST", "DELETE", "PATCH"]);

const FRESHNESS_QUERY = {
  type: "string",
  pattern: FRESHNESS_TOKEN_PATTERN,
  maxLength: 28,
  description: `a freshness token a write answered (also accepted as the ${FRESHNESS_HEADER} header): the read is served by a replica only once it has replayed it, else by the primary. A token whose write was lost in a database failover is answered by the primary with ${FRESHNESS_STATUS_HEADER}: lost; a token of a timeline the database has not reached is a 400`,
} as const;

declare module "fastify" {
  interface FastifyInstance {
    /**
     * Runs a read that may lag (counts, lists, likers, PUBLIC posts) on the server the replica
     * router chooses for the request's freshness token; the primary without replicas.
     * Authorization reads never go through here.
     */
    readFrom<T>(request: FastifyRequest, read: (pool: Pool) => Promise<T>): Promise<T>;
  }
  interface FastifyContextConfig {
    /** The route's lag-tolerant read goes through readFrom: it documents the freshness query parameter. */
    replicaRead?: boolean;
  }
}

interface SchemaObject {
  type?: string;
  $ref?: string;
  properties?: Record<string, unknown>;
}

/**
 * A copy of an object schema with one more property (schemas are shared between routes, so never
 * changed in place). A named schema ($ref) is left as it is: a write's names it (namedWriteAnswer).
 */
function withProperty(schema: unknown, name: string, property: unknown): unknown {
  const s = schema as SchemaObject | undefined;
  if (!s || s.$ref || s.type !== "object" || !s.properties) return schema;
  return { ...s, properties: { ...s.properties, [name]: property } };
}

/** Every write's success answers may carry `freshness`; routed reads accept `?freshness=`. */
function documentFreshness(route: RouteOptions): void {
  if (!route.schema) return;
  const methods = [route.method].flat();
  if (route.config?.replicaRead && methods.includes("GET")) {
    const query = route.schema.querystring ?? { type: "object", additionalProperties: false, properties: {} };
    route.schema = { ...route.schema, querystring: withProperty(query, "freshness", FRESHNESS_QUERY) };
  }
  if (methods.some((m) => WRITE_METHODS.has(m)) && route.schema.response) {
    const response = { ...(route.schema.response as Record<string, unknown>) };
    for (const status of Object.keys(response)) {
      if (/^2\d\d$/.test(status))
        response[status] = withProperty(response[status], "freshness", freshnessField.freshness);
    }
    route.schema = { ...route.schema, response };
  }
}

/** The token a read presents, from the header or the query; absent: undefined. */
function presentedToken(request: FastifyRequest): FreshnessToken | undefined {
  const header = request.headers[FRESHNESS_HEADER];
  const fromQuery = (request.query as { freshness?: unknown } | undefined)?.freshness;
  const text =
    typeof header === "string" && header !== "" ? header : typeof fromQuery === "string" ? fromQuery : undefined;
  return text === undefined ? undefined : parseFreshnessToken(text);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !Buffer.isBuffer(value);
}

/**
 * Freshness tokens and read routing for the API (docs/read-replicas.md). Without a router every
 * read uses the primary pool and writes answer no token, at no cost. With one: a successful
 * write answers the primary's WAL position read after its commit, in the x-ledger-freshness
 * header and the body's `freshness`; a routed read presents it back and is served by a replica
 * that has replayed it, or by the primary.
 */
export const readRouting = fp(async (app: FastifyInstance, opts: { primary: Pool; router?: ReplicaRouter }) => {
  app.addHook("onRoute", documentFreshness);
  const router = opts.router;
  const served = new WeakMap<FastifyRequest, { server: string; status: string | undefined }>();
  app.decorate("readFrom", async function readFrom<
    T,
  >(request: FastifyRequest, read: (pool: Pool) => Promise<T>): Promise<T> {
    const token = presentedToken(request);
    if (!router) return read(opts.primary);
    const { value, server, reason } = await router.read(token, read);
    const status = reason === "token-lost" ? "lost" : reason === "token-unverifiable" ? "unverifiable" : undefined;
    served.set(request, { server, status });
    return value;
  });
  if (!router) return;
  app.addHook("onSend", async (request, reply) => {
    const route = served.get(request);
    if (route === undefined) return;
    void reply.header(READ_FROM_HEADER, route.server);
    if (route.status !== undefined) void reply.header(FRESHNESS_STATUS_HEADER, route.status);
  });
  app.addHook("preSerialization", async (request, reply, payload: unknown) => {
    if (!WRITE_METHODS.has(request.method) || reply.statusCode >= 300 || !isPlainObject(payload)) return payload;
    // Read after the handler's commit returned. A primary that died just after the commit
    // leaves the write without a token (the client reads the primary), never a 5xx for a
    // write that committed.
    const token = await readFreshnessToken(opts.primary).catch(() => undefined);
    if (token === undefined) return payload;
    router.notePrimaryTimeline(token.timeline);
    const text = formatFreshnessToken(token);
    void reply.header(FRESHNESS_HEADER, text);
    return { ...payload, freshness: text };
  });
});
