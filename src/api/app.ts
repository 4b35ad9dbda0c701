import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { Ajv } from "ajv";
import cors from "@fastify/cors";
import type { RedisClient } from "../cache/redis-connection.ts";
import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";
import { randomUUID } from "node:crypto";
import type { Ledger } from "../ledger.ts";
import { MAX_ID_LENGTH } from "../ids.ts";
import { numericDefault } from "../config.ts";
import "./context.ts";
import { authPlugin, type JwksOptions } from "./auth.ts";
import { HttpError, errorBody, handleClientError, handleError } from "./errors.ts";
import { findInputProblem } from "./request-text.ts";
import { RouteTable } from "./route-table.ts";
import { RefusalBudget, budgetHook, budgetStore, perAddress } from "./rate-limits.ts";
import { LedgerMetrics, METRICS_REFRESH_MS } from "./metrics.ts";
import { DashboardSampler } from "./dashboard/sampler.ts";
import { dashboardRoutes } from "./dashboard/routes.ts";
import { routeGroup } from "./dashboard/request-recorder.ts";
import { finishOpenApi } from "./openapi.ts";
import { namedSchemas } from "./schemas.ts";
import { adminRoutes } from "./routes/admin.ts";
import { webhookRoutes } from "./routes/webhooks.ts";
import type { RegistryOptions } from "../webhooks/endpoint-registry.ts";
import { commentRoutes } from "./routes/comments.ts";
import { CacheMetrics } from "../cache/cache-metrics.ts";
import { CountReader } from "../cache/count-reader.ts";
import { healthRoutes, type DatabaseHealth } from "./routes/health.ts";
import { metricsRoutes } from "./routes/metrics.ts";
import { likeRoutes } from "./routes/likes.ts";
import { postRoutes } from "./routes/posts.ts";
import { relationRoutes } from "./routes/relations.ts";
import { notificationRoutes } from "./routes/notifications.ts";
import { timelineRoutes } from "./routes/timelines.ts";
import { erasureRoutes } from "./routes/erasure.ts";
import { FRESHNESS_HEADER, FRESHNESS_STATUS_HEADER, READ_FROM_HEADER, readRouting } from "./read-routing.ts";
import type { ReplicaRouter } from "../replicas/replica-router.ts";

/** Routes whose JSON body may be left out (an account with defaults, a rebuild of every item). */
const OPTIONAL_BODIES: [path: string, method: string][] = [
  ["/v1/accounts/{id}", "put"],
  ["/v1/admin/rebuild", "post"],
  ["/v1/admin/notifications/rebuild", "post"],
  ["/v1/admin/webhooks/{id}/rotate-secret", "post"],
];

export interface AppOptions {
  ledger: Ledger;
  /** The HS256 secret of the embedded default (tokens of `social-ledger token`); unused with `jwks`. */
  jwtSecret?: Uint8Array;
  /** Tokens of the product's identity provider (LEDGER_JWKS_URL): HS256 tokens are then refused. */
  jwks?: JwksOptions;
  /** Tokens valid for longer than this are refused (LEDGER_JWT_MAX_TTL_MS; default: what `token --ttl` allows). */
  jwtMaxTtlSeconds?: number;
  metrics?: LedgerMetrics;
  /** Writes per user per minute (likes, follows, blocks, posts). */
  writesPerMinute?: number;
  /** Reads per user (per IP without a token) per minute. */
  readsPerMinute?: number;
  /** Requests for the documents (/openapi.json, /docs, /dashboard and their files) per client address per minute. */
  documentsPerMinute?: number;
  /** Refused tokens (401) per client address per minute; over it, 429 and no new token is checked until the window ends. */
  authFailuresPerMinute?: number;
  /**
   * Origins a browser may call the API from (CORS): a list of origins, or ["*"] for any.
   * Absent or empty: no CORS headers, so browsers allow same-origin calls only.
   */
  corsOrigins?: readonly string[];
  /** Supervision state of the database, for /healthz and /readyz (the service passes its own). */
  databaseHealth?: () => DatabaseHealth;
  /** The dashboard's sampler (the service passes one that sees its consumers); started with the app, stopped on close. */
  dashboard?: DashboardSampler;
  /** The count reads (the Redis count layer when REDIS_URL is set); default: PostgreSQL only. */
  counts?: CountReader;
  /** The count layer's Redis client: the per-user rate limits are kept there (shared by API processes). */
  rateLimitRedis?: RedisClient;
  /** The count layer's Redis state for /readyz: off, up, or degraded (counts from PostgreSQL). */
  countsState?: () => "off" | "up" | "degraded";
  /** LEDGER_METRICS_TOKEN: /metrics then requires it as a bearer token. */
  metricsToken?: string | undefined;
  /** false: no /metrics on the API's port (serve --metrics-port serves it on another). */
  metricsOnApi?: boolean;
  /** How often the figures /metrics shows from the database are read (default METRICS_REFRESH_MS). */
  metricsRefreshMs?: number;
  /** Streaming replicas for reads that may lag, with freshness tokens (DATABASE_REPLICA_URLS; docs/read-replicas.md). */
  replicas?: ReplicaRouter;
  /** The webhook admin routes' SSRF policy, failing threshold and rotation grace (LEDGER_WEBHOOK_*). */
  webhooks?: RegistryOptions;
}

/**
 * The API as a plugin: external plugins, then ours (auth, metrics), then routes. server.ts
 * only builds and listens; tests build it and inject or listen.
 */
export const ledgerApp = fp(async (app: FastifyInstance, opts: AppOptions) => {
  app.decorate("ledger", opts.ledger);
  const routeTable = new RouteTable();
  routeTable.watch(app);
  app.decorate("routeTable", routeTable);
  app.decorate("metrics", opts.metrics ?? new LedgerMetrics(opts.ledger.pool));
  app.decorate("dashboard", opts.dashboard ?? new DashboardSampler({ pool: opts.ledger.pool, metrics: app.metrics }));
  app.addHook("onReady", async () => app.dashboard.start());
  app.addHook("onClose", async () => app.dashboard.stop());
  // A scrape reads memory only: the figures from the database are read on this timer.
  app.addHook("onReady", async () => app.metrics.startRefreshing(opts.metricsRefreshMs ?? METRICS_REFRESH_MS));
  app.addHook("onClose", async () => app.metrics.stopRefreshing());
  app.decorate(
    "counts",
    opts.counts ??
      new CountReader(opts.ledger.pool, undefined, {
        metrics: new CacheMetrics(app.metrics.registry, undefined, opts.ledger.pool),
      }),
  );
  // Named schemas (schemas.ts `named`, used by the routes as $ref) serialize the answers, validate
  // the bodies, and are the OpenAPI document's components under their names.
  const shared = namedSchemas();
  for (const schema of shared) app.addSchema(schema);
  // Query strings and params are text, so they are coerced ("16" -> 16); JSON bodies are
  // typed already and are not: {"private": 1} is a 400, not `true`. An unknown query
  // parameter (a cache buster) is dropped, not refused: removeAdditional removes what an
  // `additionalProperties: false` schema does not name.
  const coercing = new Ajv({ coerceTypes: "array", useDefaults: true, removeAdditional: true, allErrors: false });
  const strict = new Ajv({ coerceTypes: false, useDefaults: true, removeAdditional: false, allErrors: false });
  for (const validator of [coercing, strict]) validator.addSchema(shared);
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === "body" ? strict : coercing).compile(schema));
  app.setErrorHandler(handleError);
  // Only JSON bodies: a text/plain body is a 415, not a string that then fails "body must be object".
  app.removeContentTypeParser("text/plain");
  // Before any schema or handler: text that PostgreSQL cannot store exactly (NUL, unpaired
  // surrogates) is bad input in every field of every route, not a 500 or a silent U+FFFD; so
  // is nesting no route takes (8,000 levels overflowed the recursive walk this replaced: a 500).
  // The hooks run on every request: callback hooks, so none costs a promise and a microtask turn.
  app.addHook("preValidation", (request, _reply, done) => {
    const problem =
      findInputProblem(request.body, "body") ??
      findInputProblem(request.query, "querystring") ??
      findInputProblem(request.params, "params");
    done(problem ? new HttpError(400, "INVALID_INPUT", problem) : undefined);
  });
  app.setNotFoundHandler((request, reply) => {
    const allowed = routeTable.allowedFor(request.url.split("?")[0] ?? "");
    // A route of this method that answered "not found" itself (a static file that is not there) stays a 404.
    if (allowed.length > 0 && !allowed.includes(request.method)) {
      void reply
        .status(405)
        .header("allow", allowed.join(", "))
        .send(
          errorBody(
            "METHOD_NOT_ALLOWED",
            `${request.method} is not a method of ${request.url.split("?")[0]}; it answers ${allowed.join(", ")}`,
          ),
        );
      return;
    }
    void reply.status(404).send(errorBody("NOT_FOUND", `no route ${request.method} ${request.url.split("?")[0]}`));
  });

  // One limiter, so one store, for every write route: the budget is per user over all writes
  // (a store per route would let a user with 5 per minute like 5, unlike 5, follow 5, post 5, ...).
  // Reads have a store of their own with a larger budget; a read without a token (public data)
  // is counted per IP. With the Redis count layer the budgets live in its Redis, shared by every
  // API process; while it does not answer, the store counts in this process (never no limit).
  // The route hooks run after the auth hook (an app-level onRequest), so the caller is known.
  // What is answered before any caller is known has budgets per client address: the documents
  // (no token is read; /openapi.json is 450 KB), and the auth hook's own 401s.
  const perCaller = (request: FastifyRequest) => (request.caller ? `user:${request.caller.id}` : perAddress(request));
  const limits = {
    writeRateLimit: budgetHook(budgetStore("writes", opts.rateLimitRedis), opts.writesPerMinute ?? 600, perCaller),
    readRateLimit: budgetHook(budgetStore("reads", opts.rateLimitRedis), opts.readsPerMinute ?? 6000, perCaller),
  };
  const documentRateLimit = budgetHook(
    budgetStore("documents", opts.rateLimitRedis),
    opts.documentsPerMinute ?? numericDefault("LEDGER_DOCS_PER_MINUTE"),
    perAddress,
  );
  const refusals = new RefusalBudget(
    budgetStore("refusals", opts.rateLimitRedis),
    opts.authFailuresPerMinute ?? numericDefault("LEDGER_AUTH_FAILURES_PER_MINUTE"),
  );

  await app.register(swagger, {
    openapi: {
      openapi: "3.0.3",
      info: {
        title: "social-ledger",
        version: "1",
        description: "Likes and follows as exact facts; counts and follower lists as derived views with a defined lag.",
        // The license of LICENSE and package.json (test/client/client-in-step.test.ts compares them).
        license: { name: "Apache-2.0", url: "https://www.apache.org/licenses/LICENSE-2.0" },
      },
      // Relative to where the document is served from: the API answers on the document's own origin.
      servers: [{ url: "/", description: "the server that serves this document" }],
      components: {
        securitySchemes: {
          bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" },
          metricsToken: {
            type: "http",
            scheme: "bearer",
            description: "LEDGER_METRICS_TOKEN (no JWT); /metrics is open when it is not set",
          },
        },
      },
    },
    // Components are named by their $id (schemas.ts `named`), not def-0, def-1, ...
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === "string" ? json.$id : `def-${i}`),
    },
    // The generator marks every body as required; these two accept none.
    transformObject: (documentObject) => {
      if (!("openapiObject" in documentObject)) return documentObject.swaggerObject;
      const paths = (documentObject.openapiObject.paths ?? {}) as Record<
        string,
        Record<string, { requestBody?: { required?: boolean } }>
      >;
      for (const [path, method] of OPTIONAL_BODIES) {
        const body = paths[path]?.[method]?.requestBody;
        if (body) body.required = false;
      }
      finishOpenApi(documentObject.openapiObject as Parameters<typeof finishOpenApi>[0]);
      return documentObject.openapiObject;
    },
  });
  // The docs UI's routes declare no config of their own: this context marks them open.
  await app.register(async (docs) => {
    docs.addHook("onRoute", (route) => {
      route.config = { ...route.config, auth: "none" };
    });
    docs.addHook("onRequest", documentRateLimit);
    await docs.register(swaggerUi, { routePrefix: "/docs" });
  });
  if (opts.corsOrigins && opts.corsOrigins.length > 0) {
    // The preflight route @fastify/cors adds reads no token (a browser sends none with it).
    app.addHook("onRoute", (route) => {
      if (route.method === "OPTIONS" && route.url === "*") route.config = { ...route.config, auth: "none" };
    });
    await app.register(cors, {
      origin: opts.corsOrigins.includes("*") ? "*" : [...opts.corsOrigins],
      methods: ["GET", "PUT", "POST", "PATCH", "DELETE"],
      allowedHeaders: ["authorization", "content-type", "x-request-id", FRESHNESS_HEADER],
      exposedHeaders: [
        "link",
        "retry-after",
        "x-request-id",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        FRESHNESS_HEADER,
        READ_FROM_HEADER,
        FRESHNESS_STATUS_HEADER,
      ],
      maxAge: 600,
    });
  }
  await app.register(authPlugin, {
    ...(opts.jwks ? { jwks: opts.jwks } : { secret: opts.jwtSecret }),
    ...(opts.jwtMaxTtlSeconds === undefined ? {} : { maxTtlSeconds: opts.jwtMaxTtlSeconds }),
    refusals,
  });

  const metrics = app.metrics;
  app.addHook("onResponse", (request, reply, done) => {
    // routeOptions builds a new object and elapsedTime reads the clock on every access: once each.
    const options = request.routeOptions;
    const route = options.url ?? "unmatched";
    const ms = reply.elapsedTime;
    metrics.http.record(request.method, route, reply.statusCode, ms / 1000);
    app.dashboard.recordRequest(routeGroup(options.schema?.tags?.[0]), ms);
    // One line per request at info (fastify's own request logging, two lines each, is off).
    request.log.info(
      { method: request.method, url: request.url, route, status: reply.statusCode, ms: Math.round(ms * 10) / 10 },
      "request",
    );
    done();
  });
  // A request in flight when close() starts would keep its keep-alive connection open after
  // the response, and close() (a SIGTERM shutdown) would wait out keepAliveTimeout (72 s).
  // A request that arrives on such a connection after close() started is not served: 503 in our
  // shape with Retry-After (fastify's own answer, return503OnClosing, has another body).
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
  });
  app.addHook("onRequest", (_request, reply, done) => {
    // A callback hook that answers does not call done().
    if (closing)
      return void reply
        .status(503)
        .header("retry-after", "1")
        .send(errorBody("SHUTTING_DOWN", "the server is shutting down; retry on another connection"));
    done();
  });
  app.addHook("onSend", (request, reply, _payload, done) => {
    void reply.header("x-request-id", request.id);
    // An early error (401 before the body, 413 on its Content-Length) leaves the body unread:
    // node would go on reading it to reuse the connection, at whatever pace the client sends,
    // so the connection is closed instead.
    const bodyUnread = reply.statusCode >= 400 && !request.raw.complete;
    if (closing || bodyUnread) void reply.header("connection", "close");
    done();
  });

  await app.register(readRouting, { primary: opts.ledger.pool, ...(opts.replicas ? { router: opts.replicas } : {}) });
  await app.register(healthRoutes, {
    databaseHealth: opts.databaseHealth,
    countsState: opts.countsState ?? (() => "off"),
  });
  if (opts.metricsOnApi !== false)
    await app.register(metricsRoutes, { metrics: app.metrics, token: opts.metricsToken });
  await app.register(likeRoutes, limits);
  await app.register(relationRoutes, limits);
  await app.register(erasureRoutes, limits);
  await app.register(postRoutes, limits);
  await app.register(commentRoutes, limits);
  await app.register(notificationRoutes, limits);
  await app.register(timelineRoutes, limits);
  await app.register(adminRoutes, limits);
  await app.register(webhookRoutes, { ...limits, ...(opts.webhooks ? { registry: opts.webhooks } : {}) });
  await app.register(dashboardRoutes, {
    countsState: opts.countsState ?? (() => "off"),
    readRateLimit: limits.readRateLimit,
    documentRateLimit,
  });
  app.get(
    "/openapi.json",
    { schema: { hide: true }, config: { auth: "none" }, onRequest: documentRateLimit },
    async () => app.swagger(),
  );
});

/** How long a client may take (ms): node's defaults let a request trickle in for ever. */
export interface HttpTimeouts {
  /** The request line and headers. */
  headersMs: number;
  /** The whole request, body included, from its first byte (408, then the connection closes). */
  requestMs: number;
  /** A socket with no traffic either way, also while a request is served (an audit of a large database). */
  idleMs: number;
  /** An idle keep-alive connection between requests (above the 60 s of common load balancers, as fastify's default). */
  keepAliveMs: number;
  /** How often node checks the headers and request deadlines (its default, 30 s, let a request run 30 s over). */
  checkEveryMs: number;
}

export const HTTP_TIMEOUTS: HttpTimeouts = {
  headersMs: 10_000,
  requestMs: 30_000,
  idleMs: 120_000,
  keepAliveMs: 72_000,
  checkEveryMs: 1_000,
};

export interface BuildOptions extends AppOptions {
  /** pino options, or false for no logs (tests). */
  logger?: boolean | { level: string };
  /** Overrides of HTTP_TIMEOUTS (tests use short ones). */
  httpTimeouts?: Partial<HttpTimeouts>;
}

export async function buildApp(options: BuildOptions): Promise<FastifyInstance> {
  const timeouts = { ...HTTP_TIMEOUTS, ...options.httpTimeouts };
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    // A slow client (one byte every few seconds, no token needed) holds a socket for at most
    // requestMs; fastify's requestTimeout default is 0 (none) and it overrides node's.
    requestTimeout: timeouts.requestMs,
    connectionTimeout: timeouts.idleMs,
    keepAliveTimeout: timeouts.keepAliveMs,
    http: {
      headersTimeout: timeouts.headersMs,
      requestTimeout: timeouts.requestMs,
      connectionsCheckingInterval: timeouts.checkEveryMs,
    },
    return503OnClosing: false,
    logController: new LogController({ disableRequestLogging: true }),
    clientErrorHandler: handleClientError,
    bodyLimit: 64 * 1024,
    // Ids are valid up to MAX_ID_LENGTH (128) characters, 3x that when percent-encoded; the
    // default 100 sent longer (valid) ids to a 414 with fastify's own body.
    routerOptions: { maxParamLength: 3 * MAX_ID_LENGTH },
    // Errors the router raises before any route (a malformed percent-escape in the path), in
    // our error shape instead of fastify's default body; these replies skip the onSend hook,
    // so the request id is set here.
    frameworkErrors: (err, request, reply) => {
      void (reply as FastifyReply)
        .status(400)
        .header("x-request-id", request.id)
        .send(errorBody("INVALID_INPUT", err.message));
    },
    genReqId: (request) => {
      const given = request.headers["x-request-id"];
      return typeof given === "string" && /^[A-Za-z0-9._-]{1,64}$/.test(given) ? given : randomUUID();
    },
  });
  await app.register(ledgerApp, options);
  return app;
}
