import type { FastifyInstance, FastifyRequest } from "fastify";
import { requireAdmin } from "../auth.ts";
import type { RateLimits } from "../context.ts";
import { bearer, errors, named, namedWriteAnswer } from "../schemas.ts";
import { EndpointRegistry, type RegistryOptions } from "../../webhooks/endpoint-registry.ts";
import { EVENT_TYPES, WEBHOOK_SOURCES, type WebhookSource } from "../../webhooks/webhook-events.ts";

/** The admin routes of webhook endpoints (docs/webhooks.md); every one needs an admin token. */

const integer = { type: "integer" } as const;
const eventList = {
  type: "array",
  minItems: 1,
  maxItems: 64,
  uniqueItems: true,
  items: { type: "string", enum: ["*", ...EVENT_TYPES] },
  description: 'event types to deliver, or ["*"] for every type',
} as const;
const url = {
  type: "string",
  minLength: 1,
  maxLength: 2048,
  description: "http(s) URL; by default it must resolve to public addresses only (LEDGER_WEBHOOK_ALLOW_PRIVATE)",
} as const;
const endpointProperties = {
  id: { type: "string" },
  url: { type: "string" },
  events: { type: "array", items: { type: "string" } },
  status: { type: "string", enum: ["active", "paused", "failing"] },
  createdAt: { type: "string", format: "date-time" },
  updatedAt: { type: "string", format: "date-time" },
  previousSecretValidUntil: {
    type: "string",
    format: "date-time",
    description: "after a rotation: until when the previous secret signs too",
  },
  backlog: { ...integer, description: "outbox events past no cursor of this endpoint yet" },
  oldestPendingSeconds: { ...integer, description: "age of the oldest of them; absent when there is none" },
} as const;
const endpointRequired = ["id", "url", "events", "status", "createdAt", "updatedAt", "backlog"];
const endpoint = namedWriteAnswer("WebhookEndpoint", {
  type: "object",
  required: endpointRequired,
  properties: endpointProperties,
});
const endpointWithSecret = namedWriteAnswer("WebhookEndpointSecret", {
  type: "object",
  required: [...endpointRequired, "secret"],
  properties: {
    ...endpointProperties,
    secret: { type: "string", description: "whsec_ + base64 of 32 random bytes: shown only in this answer" },
  },
});
const cursor = named("WebhookCursor", {
  type: "object",
  required: ["source", "partition", "deliveredUpto", "last", "attempts", "nextAttemptAt"],
  properties: {
    source: { type: "string", enum: WEBHOOK_SOURCES },
    partition: integer,
    deliveredUpto: {
      ...integer,
      description: "events 1..deliveredUpto of the partition are delivered (a 2xx) or not subscribed",
    },
    last: { ...integer, description: "the partition's last committed event" },
    attempts: { ...integer, description: "failed attempts of the next event" },
    nextAttemptAt: { type: "string", format: "date-time" },
    lastError: { type: "string" },
    lastStatus: integer,
  },
});
const endpointDetail = named("WebhookEndpointDetail", {
  type: "object",
  required: [...endpointRequired, "cursors"],
  properties: { ...endpointProperties, cursors: { type: "array", items: cursor } },
});
const endpointList = named("WebhookEndpointList", {
  type: "object",
  required: ["endpoints"],
  properties: { endpoints: { type: "array", items: endpoint } },
});
const deleted = namedWriteAnswer("WebhookDeleted", {
  type: "object",
  required: ["id", "deleted"],
  properties: { id: { type: "string" }, deleted: { type: "boolean", enum: [true] } },
});
const createBody = named("WebhookEndpointDraft", {
  type: "object",
  required: ["url", "events"],
  additionalProperties: false,
  properties: { url, events: eventList },
});
const updateBody = named("WebhookEndpointChange", {
  type: "object",
  minProperties: 1,
  additionalProperties: false,
  properties: { url, events: eventList },
});
const rotateBody = named("WebhookSecretRotation", {
  type: ["object", "null"],
  additionalProperties: false,
  properties: {
    graceSeconds: {
      type: "integer",
      minimum: 0,
      maximum: 31_536_000,
      description: "how long the old secret still signs (default LEDGER_WEBHOOK_ROTATION_GRACE_MS)",
    },
  },
});
const replayBody = named("WebhookReplay", {
  type: "object",
  required: ["source", "partition", "fromSeq"],
  additionalProperties: false,
  properties: {
    source: { type: "string", enum: WEBHOOK_SOURCES },
    partition: { type: "integer", minimum: 0, maximum: 1023 },
    fromSeq: {
      type: "integer",
      minimum: 1,
      description: "the first event to deliver again; refused (409) below the retention floor",
    },
  },
});
const endpointParams = {
  type: "object",
  required: ["id"],
  additionalProperties: false,
  properties: { id: { type: "string", minLength: 1, maxLength: 64 } },
} as const;

type WithId = FastifyRequest<{ Params: { id: string } }>;

export async function webhookRoutes(
  app: FastifyInstance,
  opts: RateLimits & { registry?: RegistryOptions },
): Promise<void> {
  const registry = new EndpointRegistry(app.ledger.pool, opts.registry);
  const tags = ["admin"];

  app.post(
    "/v1/admin/webhooks",
    {
      schema: {
        tags,
        summary: "Register a webhook endpoint; answers its signing secret (only here)",
        security: bearer,
        body: createBody,
        response: { 201: endpointWithSecret, ...errors(400, 401, 403, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Body: { url: string; events: string[] } }>, reply) => {
      requireAdmin(request);
      const { endpoint: created, secret } = await registry.create(request.body);
      return reply.status(201).send({ ...created, secret });
    },
  );

  app.get(
    "/v1/admin/webhooks",
    {
      schema: {
        tags,
        summary: "Webhook endpoints with their status and backlog",
        security: bearer,
        response: { 200: endpointList, ...errors(401, 403, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request) => {
      requireAdmin(request);
      return { endpoints: await registry.list() };
    },
  );

  app.get(
    "/v1/admin/webhooks/:id",
    {
      schema: {
        tags,
        summary: "One webhook endpoint with its delivery cursors",
        security: bearer,
        params: endpointParams,
        response: { 200: endpointDetail, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: WithId) => {
      requireAdmin(request);
      const found = await registry.get(request.params.id);
      const cursors = (await registry.cursors(request.params.id)).map((c) => ({
        source: c.source,
        partition: c.part,
        deliveredUpto: c.deliveredUpto,
        last: c.last,
        attempts: c.attempts,
        nextAttemptAt: c.nextAttemptAt.toISOString(),
        ...(c.lastError === null ? {} : { lastError: c.lastError }),
        ...(c.lastStatus === null ? {} : { lastStatus: c.lastStatus }),
      }));
      return { ...found, cursors };
    },
  );

  app.patch(
    "/v1/admin/webhooks/:id",
    {
      schema: {
        tags,
        summary: "Change a webhook endpoint's url or events (from the next delivery on)",
        security: bearer,
        params: endpointParams,
        body: updateBody,
        response: { 200: endpoint, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string }; Body: { url?: string; events?: string[] } }>) => {
      requireAdmin(request);
      return registry.update(request.params.id, request.body);
    },
  );

  app.delete(
    "/v1/admin/webhooks/:id",
    {
      schema: {
        tags,
        summary: "Delete a webhook endpoint, its cursors and its retention hold",
        security: bearer,
        params: endpointParams,
        response: { 200: deleted, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: WithId) => {
      requireAdmin(request);
      await registry.delete(request.params.id);
      return { id: request.params.id, deleted: true };
    },
  );

  for (const [action, paused, summary] of [
    ["pause", true, "Pause deliveries to a webhook endpoint (its backlog and retention hold stay)"],
    ["resume", false, "Resume deliveries to a webhook endpoint (every cursor due at once)"],
  ] as const) {
    app.post(
      `/v1/admin/webhooks/:id/${action}`,
      {
        schema: {
          tags,
          summary,
          security: bearer,
          params: endpointParams,
          response: { 200: endpoint, ...errors(400, 401, 403, 404, 429) },
        },
        onRequest: opts.writeRateLimit,
      },
      async (request: WithId) => {
        requireAdmin(request);
        return registry.setPaused(request.params.id, paused);
      },
    );
  }

  app.post(
    "/v1/admin/webhooks/:id/rotate-secret",
    {
      schema: {
        tags,
        summary: "A new signing secret (answered only here); the old one signs too for a grace period",
        security: bearer,
        params: endpointParams,
        body: rotateBody,
        response: { 200: endpointWithSecret, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string }; Body: { graceSeconds?: number } | null }>) => {
      requireAdmin(request);
      const { endpoint: rotated, secret } = await registry.rotateSecret(
        request.params.id,
        request.body?.graceSeconds ?? registry.rotationGraceSeconds,
      );
      return { ...rotated, secret };
    },
  );

  app.post(
    "/v1/admin/webhooks/:id/replay",
    {
      schema: {
        tags,
        summary: "Deliver a partition of an outbox again from a position (same webhook-ids)",
        security: bearer,
        params: endpointParams,
        body: replayBody,
        response: { 200: endpoint, ...errors(400, 401, 403, 404, 409, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (
      request: FastifyRequest<{
        Params: { id: string };
        Body: { source: WebhookSource; partition: number; fromSeq: number };
      }>,
    ) => {
      requireAdmin(request);
      return registry.replay(request.params.id, request.body);
    },
  );
}
