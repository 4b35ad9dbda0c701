import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyRequest } from "fastify";
import fastifyStatic from "@fastify/static";
import { requireAdmin } from "../auth.ts";
import type { RateLimit } from "../context.ts";
import { bearer, errors, named } from "../schemas.ts";

const PUBLIC_DIR = fileURLToPath(new URL("./public/", import.meta.url));
/** uPlot is served from its npm package as is: no build step, no CDN. */
const UPLOT_DIR = path.dirname(createRequire(import.meta.url).resolve("uplot/dist/uPlot.iife.min.js"));
const UPLOT_FILES: ReadonlySet<string> = new Set(["/uPlot.iife.min.js", "/uPlot.min.css"]);

/**
 * The page loads only its own files and talks only to this service; uPlot sets styles
 * through the DOM, hence 'unsafe-inline' for styles (never for scripts).
 */
const PAGE_POLICY =
  "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const integer = { type: "integer" } as const;
const nullableObject = { type: ["object", "null"], additionalProperties: true } as const;
const dashboardResponse = named("DashboardState", {
  type: "object",
  required: [
    "now",
    "sampleMs",
    "partitions",
    "thresholds",
    "status",
    "samples",
    "consumers",
    "audit",
    "drift",
    "watermarks",
    "cache",
  ],
  properties: {
    now: integer,
    sampleMs: integer,
    partitions: integer,
    thresholds: {
      type: "object",
      required: ["lagMs", "consumerFailures"],
      properties: { lagMs: integer, consumerFailures: integer },
    },
    status: {
      type: "object",
      required: ["state", "reasons", "partitions"],
      properties: {
        state: { type: "string", enum: ["ok", "alarm"] },
        reasons: { type: "array", items: { type: "string" } },
        partitions: {
          type: "array",
          description: "The partitions behind the lag alarms: watermark stalled, or lag growing at every sample",
          items: {
            type: "object",
            required: ["view", "part", "rule"],
            properties: {
              view: { type: "string" },
              part: integer,
              rule: { type: "string", enum: ["stalled", "growing"] },
            },
          },
        },
      },
    },
    samples: {
      type: "array",
      description: "Oldest first; docs/dashboard.md describes a sample",
      items: { type: "object", additionalProperties: true },
    },
    consumers: {
      type: "array",
      items: {
        type: "object",
        required: ["name", "kind", "failedInARow"],
        properties: { name: { type: "string" }, kind: { type: "string" }, failedInARow: integer },
      },
    },
    audit: {
      ...nullableObject,
      description: "The last audit (periodic or through GET /v1/admin/audit), null before the first",
    },
    drift: {
      type: "object",
      description: "Rebuild runs per counter kind, from the database",
      additionalProperties: true,
    },
    watermarks: {
      type: "array",
      items: {
        type: "object",
        required: ["view", "part", "appliedUpto", "lag", "at"],
        properties: { view: { type: "string" }, part: integer, appliedUpto: integer, lag: integer, at: integer },
      },
    },
    cache: {
      type: "object",
      description:
        "The Redis count layer (REDIS_URL): configured, and state up or degraded (counts then come from PostgreSQL); configured=false: no cache",
      additionalProperties: true,
    },
  },
});

/** GET /dashboard (the page and its files) and GET /v1/admin/dashboard (its one JSON endpoint). */
export async function dashboardRoutes(
  app: FastifyInstance,
  opts: { countsState: () => "off" | "up" | "degraded"; readRateLimit: RateLimit; documentRateLimit: RateLimit },
): Promise<void> {
  const { dashboard, ledger } = app;
  const page = await readFile(path.join(PUBLIC_DIR, "index.html"), "utf8");

  // The page and its files read no token (the page asks for one and sends it to the JSON
  // endpoint, which requires an admin); the static plugin's routes declare no config of their own.
  await app.register(async (files) => {
    files.addHook("onRoute", (route) => {
      route.config = { ...route.config, auth: "none" };
    });
    files.addHook("onRequest", opts.documentRateLimit);
    await files.register(fastifyStatic, {
      root: PUBLIC_DIR,
      prefix: "/dashboard/assets/",
      decorateReply: false,
      index: false,
    });
    await files.register(fastifyStatic, {
      root: UPLOT_DIR,
      prefix: "/dashboard/vendor/uplot/",
      decorateReply: false,
      index: false,
      allowedPath: (pathName) => UPLOT_FILES.has(pathName),
    });
  });

  app.get(
    "/dashboard",
    { schema: { hide: true }, config: { auth: "none" }, onRequest: opts.documentRateLimit },
    async (_request, reply) => {
      void reply
        .type("text/html; charset=utf-8")
        .header("content-security-policy", PAGE_POLICY)
        .header("cache-control", "no-store");
      return page;
    },
  );

  app.get(
    "/v1/admin/dashboard",
    {
      schema: {
        tags: ["admin"],
        summary: "The operator dashboard's time series, alarms and tables (GET /dashboard shows them)",
        security: bearer,
        querystring: {
          type: "object",
          additionalProperties: false,
          properties: {
            since: { type: "integer", minimum: 0, description: "Only samples after this time (epoch ms)" },
          },
        },
        response: { 200: dashboardResponse, ...errors(400, 401, 403, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: FastifyRequest<{ Querystring: { since?: number } }>) => {
      requireAdmin(request);
      const now = Date.now();
      const newest = dashboard.newestViews();
      const watermarks = newest
        ? Object.entries(newest.views).flatMap(([view, v]) =>
            v.lag.map((lag, part) => ({ view, part, appliedUpto: v.appliedUpto[part]!, lag, at: newest.t })),
          )
        : [];
      return {
        now,
        sampleMs: dashboard.sampleMs,
        partitions: ledger.partitions,
        thresholds: dashboard.thresholds,
        status: dashboard.status(now),
        samples: dashboard.samplesSince(request.query.since ?? 0),
        consumers: dashboard.consumers(),
        audit: dashboard.audit(),
        drift: dashboard.drift(),
        watermarks,
        cache: { configured: opts.countsState() !== "off", state: opts.countsState() },
      };
    },
  );
}
