import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller, requireSelfOrAdmin } from "../auth.ts";
import { bearer, errors, idParams, named, namedWriteAnswer } from "../schemas.ts";
import { ERASURE_PHASES, type ErasureStatus } from "../../erasure/erasure-service.ts";
import { ErasureNotFoundError } from "../../erasure/erasure-errors.ts";

const integer = { type: "integer" } as const;
const dateTime = { type: "string", format: "date-time" } as const;

const erasure = {
  type: "object",
  required: [
    "accountId",
    "phase",
    "done",
    "remaining",
    "total",
    "batches",
    "requestedBy",
    "startedAt",
    "updatedAt",
    "finishedAt",
  ],
  properties: {
    accountId: { type: "string" },
    phase: {
      type: "string",
      enum: [...ERASURE_PHASES],
      description: "the phase the erasure is in (docs/erasure.md); done: the account is erased",
    },
    done: { ...integer, description: "facts turned off so far" },
    remaining: { ...integer, description: "facts left, from the count taken at the start" },
    total: integer,
    batches: integer,
    requestedBy: { type: "string", enum: ["self", "admin", "cli"] },
    startedAt: dateTime,
    updatedAt: dateTime,
    finishedAt: { ...dateTime, nullable: true },
  },
};
/** An erasure's record: GET /v1/accounts/{id}/erasure and the `erasures` of GET /v1/admin/status. */
export const erasureSchema = named("Erasure", erasure);
/** DELETE /v1/accounts/{id}'s answer: the record, as a write's answer. */
const erasureAnswer = namedWriteAnswer("ErasureAnswer", erasure);

export function erasureJson(s: ErasureStatus) {
  return {
    ...s,
    startedAt: s.startedAt.toISOString(),
    updatedAt: s.updatedAt.toISOString(),
    finishedAt: s.finishedAt?.toISOString() ?? null,
  };
}

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

/**
 * DELETE /v1/accounts/{id} (the account itself or an admin; docs/erasure.md, docs/api.md): an
 * account with at most one batch of facts is erased within the request (200, phase done);
 * a bigger one is accepted (202, Location: its GET /v1/accounts/{id}/erasure) and the service's
 * background job runs its batches. Repeating the DELETE starts nothing new: 202 while it runs,
 * 200 once done. Another user is 403 before anything is looked up, as for PUT /v1/accounts/{id}.
 */
export async function erasureRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger } = app;
  const accountOf = (request: IdRequest): string =>
    request.params.id === "me" ? requireCaller(request).id : request.params.id;
  const where = (accountId: string) => `/v1/accounts/${encodeURIComponent(accountId)}/erasure`;

  app.delete(
    "/v1/accounts/:id",
    {
      schema: {
        tags: ["relations"],
        summary:
          "Erase an account (the account itself or an admin): 200 when done within the request, else 202 with Location; every fact goes through the outboxes, so every count drops exactly",
        security: bearer,
        params: idParams,
        response: { 200: erasureAnswer, 202: erasureAnswer, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (request: IdRequest, reply: FastifyReply) => {
      const accountId = accountOf(request);
      const caller = requireSelfOrAdmin(request, accountId);
      const started = await ledger.erasure.start(accountId, caller.id === accountId ? "self" : "admin");
      let status = started.status;
      if (status.phase !== "done" && status.total <= ledger.erasure.batchSize)
        status = await ledger.erasure.run(accountId);
      if (status.phase === "done") return reply.status(200).send(erasureJson(status));
      return reply.status(202).header("location", where(accountId)).send(erasureJson(status));
    },
  );

  app.get(
    "/v1/accounts/:id/erasure",
    {
      config: { auth: "required" },
      schema: {
        tags: ["relations"],
        summary: "The progress of an account's erasure (the account itself or an admin)",
        security: bearer,
        params: idParams,
        response: { 200: erasureSchema, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: IdRequest) => {
      const accountId = accountOf(request);
      requireSelfOrAdmin(request, accountId);
      const status = await ledger.erasure.status(accountId);
      if (!status) throw new ErasureNotFoundError(accountId);
      return erasureJson(status);
    },
  );
}
