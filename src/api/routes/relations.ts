import type { FastifyInstance, FastifyRequest } from "fastify";
import type { WriteLimit } from "../context.ts";
import { requireCaller, requireSelfOrAdmin } from "../auth.ts";
import { HttpError, notFound } from "../errors.ts";
import { bearer, countQuery, countSource, errors, idParams, pageQuery, relationOutcome } from "../schemas.ts";
import { FOLLOWER_COUNTS } from "../../cache/counter-kinds.ts";
import { listFollowers } from "../../relations/relation-reads.ts";
import { blockedEitherWay } from "../../relations/relation-service.ts";
import type { RelationResult } from "../../relations/types.ts";

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

/** CHANGED and NOOP are 200; a rule's REJECTED is a 409 carrying the rule's code and reason. */
function toResponse(result: RelationResult) {
  if (result.outcome === "REJECTED") throw new HttpError(409, result.code ?? "REJECTED", result.reason);
  return { outcome: result.outcome, state: result.state, version: result.version, seq: result.seq, reason: result.reason };
}

export async function relationRoutes(app: FastifyInstance, opts: { writeRateLimit: WriteLimit }): Promise<void> {
  const { ledger, metrics } = app;
  const write = (operation: string, run: (me: string, other: string) => Promise<RelationResult>) => async (request: IdRequest) => {
    const caller = requireCaller(request);
    const result = await run(caller.id, request.params.id);
    metrics.outcomes.inc({ operation, outcome: result.outcome });
    return toResponse(result);
  };
  const writeSchema = (summary: string) => ({
    schema: { tags: ["relations"], summary, security: bearer, params: idParams, response: { 200: relationOutcome, ...errors(400, 401, 404, 409, 429) } },
    onRequest: opts.writeRateLimit,
  });

  app.put("/v1/accounts/:id", {
    schema: {
      tags: ["relations"],
      summary: "Create an account, or change only the settings the body names (the user itself, or an admin); making a private account public approves its pending follow requests",
      security: bearer, params: idParams,
      // The body is optional: no body (or {}) creates a public account, and changes nothing of an existing one.
      body: { type: "object", nullable: true, additionalProperties: false, properties: { private: { type: "boolean" } } },
      response: {
        200: { type: "object", properties: { id: { type: "string" }, private: { type: "boolean" } } },
        ...errors(400, 401, 403),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Body: { private?: boolean } | undefined }>) => {
    if (request.params.id === "me") throw new HttpError(400, "INVALID_INPUT", "id: 'me' is reserved");
    requireSelfOrAdmin(request, request.params.id);
    const settings = await ledger.relations.upsertAccount(request.params.id, { private: request.body?.private });
    return { id: settings.accountId, private: settings.private };
  });

  app.put("/v1/accounts/me/following/:id", writeSchema("Follow (a private account gets a request)"), write("follow", (me, id) => ledger.relations.follow(me, id)));
  app.delete("/v1/accounts/me/following/:id", writeSchema("Unfollow, or withdraw a request"), write("unfollow", (me, id) => ledger.relations.unfollow(me, id)));
  app.post("/v1/accounts/me/follow-requests/:id/approve", writeSchema("Approve a pending request"), write("approve", (me, id) => ledger.relations.decide(me, id, true)));
  app.post("/v1/accounts/me/follow-requests/:id/reject", writeSchema("Reject a pending request"), write("reject", (me, id) => ledger.relations.decide(me, id, false)));
  app.put("/v1/accounts/me/blocks/:id", writeSchema("Block: removes both directions of the relation"), write("block", (me, id) => ledger.relations.block(me, id)));
  app.delete("/v1/accounts/me/blocks/:id", writeSchema("Unblock: restores nothing"), write("unblock", (me, id) => ledger.relations.unblock(me, id)));

  app.get("/v1/accounts/me/relationships/:id", {
    schema: {
      tags: ["relations"], summary: "My relationship to an account, from the truth", security: bearer, params: idParams,
      response: {
        200: {
          type: "object",
          properties: { following: { type: "boolean" }, requested: { type: "boolean" }, followedBy: { type: "boolean" }, blocking: { type: "boolean" }, blockedBy: { type: "boolean" } },
        },
        ...errors(400, 401, 404),
      },
    },
  }, async (request: IdRequest) => ledger.relations.relationship(requireCaller(request).id, request.params.id));

  /** Someone in a block with the account sees it as missing. */
  const requireVisibleAccount = async (callerId: string, accountId: string) => {
    const { rows } = await ledger.pool.query<{ known: boolean }>("SELECT EXISTS (SELECT 1 FROM account WHERE account_id = $1) AS known", [accountId]);
    if (!rows[0]!.known || (callerId !== accountId && (await blockedEitherWay(ledger.pool, callerId, accountId)))) throw notFound("account");
  };

  app.get("/v1/accounts/:id/followers", {
    schema: {
      tags: ["relations"], summary: "Followers from the projection, newest first (opaque cursor)", security: bearer, params: idParams, querystring: pageQuery,
      response: {
        200: {
          type: "object",
          properties: {
            followers: { type: "array", items: { type: "object", properties: { accountId: { type: "string" }, since: { type: "string", format: "date-time" } } } },
            nextCursor: { type: "string" },
          },
        },
        ...errors(400, 401, 404),
      },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { limit: number; cursor?: string } }>) => {
    await requireVisibleAccount(requireCaller(request).id, request.params.id);
    return listFollowers(ledger.pool, request.params.id, request.query);
  });

  app.get("/v1/accounts/:id/follower-count", {
    schema: {
      tags: ["relations"], summary: "Follower count from the projection, with its lag", security: bearer, params: idParams, querystring: countQuery,
      response: { 200: { type: "object", properties: { count: { type: "integer" }, lag: { type: "integer" }, stale: { type: "boolean" }, ...countSource } }, ...errors(400, 401, 404) },
    },
  }, async (request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>) => {
    await requireVisibleAccount(requireCaller(request).id, request.params.id);
    return app.counts.read(FOLLOWER_COUNTS, request.params.id, request.query);
  });
}
