import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimits } from "../context.ts";
import { requireCaller, requireSelfOrAdmin, type Caller } from "../auth.ts";
import { HttpError, notFound } from "../errors.ts";
import { pageOptions, sendPage, type PageQuery } from "../paging.ts";
import {
  accountRow,
  accountSince,
  bearer,
  countFields,
  countQuery,
  countSource,
  errors,
  id,
  idParams,
  lagQuery,
  named,
  namedWriteAnswer,
  optionalBearer,
  pageOf,
  pageQuery,
  relationOutcome,
  relationship,
  relationshipProperties,
  relationshipRef,
} from "../schemas.ts";
import { ensureActingAccount, setHideCollections } from "../../relations/account-settings.ts";
import { AccountNotFoundError } from "../../relations/errors.ts";
import {
  MAX_RELATIONSHIPS,
  asSeenByViewer,
  followerCount,
  followingCount,
  listBlocks,
  listFollowRequests,
  listFollowers,
  listFollowing,
  readAccount,
  relationships,
  type Account,
} from "../../relations/relation-reads.ts";
import { FOLLOWER_COUNTS } from "../../cache/counter-kinds.ts";
import { blockedByOnly, blockedEitherWay } from "../../relations/relation-service.ts";
import type { RelationResult, ViewerRelationship } from "../../relations/types.ts";

type IdRequest = FastifyRequest<{ Params: { id: string } }>;
type ListRequest = FastifyRequest<{ Params: { id: string }; Querystring: PageQuery }>;

const collectionsHidden = () =>
  new HttpError(403, "COLLECTIONS_HIDDEN", "this account hides its followers and following");

const account = {
  type: "object",
  required: ["id", "private", "hideCollections"],
  properties: {
    id: { type: "string" },
    private: { type: "boolean", description: "follows of this account are requests it approves or rejects" },
    hideCollections: {
      type: "boolean",
      description: "its follower and following lists and counts are hidden from everyone else",
    },
  },
} as const;
const accountWritten = namedWriteAnswer("Account", account);
const accountSettings = named("AccountSettings", {
  type: "object",
  nullable: true,
  additionalProperties: false,
  properties: {
    private: {
      type: "boolean",
      description: "follow requests need approval; making the account public approves the pending ones",
    },
    hideCollections: {
      type: "boolean",
      description: "hide my followers and following (lists and counts) from everyone else",
    },
  },
});
const accountProfile = named("AccountProfile", {
  ...account,
  properties: {
    ...account.properties,
    counts: named("AccountCounts", {
      type: "object",
      description: "absent when the account hides its collections from the viewer",
      required: ["followers", "following", "lag", "stale"],
      properties: {
        followers: { type: "integer", description: "from the projection: may lag by `lag` events" },
        following: { type: "integer", description: "from the truth: exact" },
        lag: { type: "integer" },
        stale: { type: "boolean", description: "lag > allowedLag" },
      },
    }),
  },
});
const relationshipList = named("RelationshipList", {
  type: "array",
  items: named("AccountRelationship", {
    type: "object",
    required: ["id", ...relationship.required],
    properties: { id: { type: "string" }, ...relationshipProperties },
  }),
});
const followerCountSchema = named("FollowerCount", {
  type: "object",
  required: ["count", "source"],
  properties: { count: { type: "integer" }, lag: countFields.lag, stale: countFields.stale, ...countSource },
});
const followerPage = pageOf("FollowerPage", "followers", accountSince);
const followingPage = pageOf("FollowingPage", "following", accountSince);
const followRequestPage = pageOf("FollowRequestPage", "requests", named("FollowRequest", accountRow("requestedAt")));
const blockPage = pageOf("BlockPage", "blocks", accountSince);

/** `me` names the caller in the path's first part; as the other account of a relation route it would be the caller's relation to themselves. */
function refuseMeAsTarget(other: string): void {
  if (other === "me")
    throw new HttpError(
      400,
      "INVALID_INPUT",
      "`me` cannot be the target of this route: name the other account by its id",
    );
}

export async function relationRoutes(app: FastifyInstance, opts: RateLimits): Promise<void> {
  const { ledger, metrics } = app;

  /** `me` in an account path is the caller (a token is then required). */
  const accountParam = (request: IdRequest): string =>
    request.params.id === "me" ? requireCaller(request).id : request.params.id;

  /** The account as the viewer may see it: missing, or in a block with the viewer either way, is 404. */
  const visibleAccount = async (viewer: Caller | null, accountId: string): Promise<Account> => {
    const found = await readAccount(ledger.pool, accountId);
    if (!found || (viewer && viewer.id !== accountId && (await blockedEitherWay(ledger.pool, viewer.id, accountId))))
      throw notFound("account");
    return found;
  };
  const collectionsVisible = (viewer: Caller | null, shown: Account) =>
    !shown.hideCollections || viewer?.id === shown.id || viewer?.admin === true;
  const requireVisibleCollections = async (viewer: Caller | null, accountId: string): Promise<void> => {
    if (!collectionsVisible(viewer, await visibleAccount(viewer, accountId))) throw collectionsHidden();
  };

  /**
   * The API's approve and reject set a target state: where the pair already is in it, a NOOP.
   * The library's decide() is the chapter's (table 30-1: anything but PENDING is REJECTED
   * NOT_PENDING); its rejection carries the state it read under the pair's row lock, so the
   * NOOP is decided on what the transaction saw, not on a later read.
   */
  const decideToTarget = async (me: string, other: string, approve: boolean): Promise<RelationResult> => {
    const result = await ledger.relations.decide(me, other, approve);
    const target = approve ? "ACTIVE" : "REMOVED";
    if (result.outcome === "REJECTED" && result.code === "NOT_PENDING" && result.state === target && me !== other) {
      return { outcome: "NOOP", state: result.state, version: result.version, seq: 0, reason: `already ${target}` };
    }
    return result;
  };

  /** My relationship to `other` as I may see it (asSeenByViewer): an account that blocks me, and that I do not block, is unknown. */
  const myRelationship = async (me: string, other: string): Promise<ViewerRelationship> => {
    refuseMeAsTarget(other);
    const seen = asSeenByViewer(await ledger.relations.relationship(me, other));
    if (!seen) throw new AccountNotFoundError(other);
    return seen;
  };

  /**
   * CHANGED and NOOP are 200 with my relationship afterwards; a rule's REJECTED is a 409 carrying
   * the rule's code and reason. Towards an account that blocks the caller (and that the caller
   * does not block), every write but a block answers as towards an account that does not exist,
   * and writes nothing (docs/api.md, "What a blocked user learns"). `towardsBlocker` says how:
   * "checked-first" for writes that never look at blocks (unfollow, decisions, unblock: refused
   * before they run); "rejected-by-write" for a follow, whose write checks blocks itself after
   * the pair's lock, so its REJECTED BLOCKED is told apart (my own block of them: 409; theirs: the
   * unknown account); "allowed" for a block, which is a defence and answers as for any account.
   */
  const write =
    (
      operation: string,
      run: (me: string, other: string) => Promise<RelationResult>,
      towardsBlocker: "checked-first" | "rejected-by-write" | "allowed",
    ) =>
    async (request: IdRequest) => {
      const caller = requireCaller(request);
      const other = request.params.id;
      refuseMeAsTarget(other);
      await ensureActingAccount(ledger.pool, caller.id, other);
      if (towardsBlocker === "checked-first" && (await blockedByOnly(ledger.pool, caller.id, other)))
        throw new AccountNotFoundError(other);
      const result = await run(caller.id, other);
      metrics.outcomes.inc({ operation, outcome: result.outcome });
      if (result.outcome === "REJECTED") {
        if (result.code === "BLOCKED" && (await blockedByOnly(ledger.pool, caller.id, other)))
          throw new AccountNotFoundError(other);
        throw new HttpError(409, result.code ?? "REJECTED", result.reason);
      }
      const after = asSeenByViewer(await ledger.relations.relationship(caller.id, other));
      return {
        outcome: result.outcome,
        state: result.state,
        version: result.version,
        seq: result.seq,
        reason: result.reason,
        // They blocked me after the write committed: a relationship with nothing in it is all there is to show.
        relationship: after ?? {
          following: false,
          requested: false,
          followedBy: false,
          requestedBy: false,
          blocking: false,
        },
      };
    };
  const writeSchema = (summary: string, statuses: number[]) => ({
    schema: {
      tags: ["relations"],
      summary,
      security: bearer,
      params: idParams,
      response: { 200: relationOutcome, ...errors(400, 401, 404, 410, 429, ...statuses) },
    },
    onRequest: opts.writeRateLimit,
  });

  app.put(
    "/v1/accounts/:id",
    {
      schema: {
        tags: ["relations"],
        summary:
          "Create an account, or change only the settings the body names (the user itself, or an admin); making a private account public approves its pending follow requests",
        security: bearer,
        params: idParams,
        // The body is optional: no body (or {}) creates a public account, and changes nothing of an existing one.
        body: accountSettings,
        response: { 200: accountWritten, ...errors(400, 401, 403, 410, 429) },
      },
      onRequest: opts.writeRateLimit,
    },
    async (
      request: FastifyRequest<{
        Params: { id: string };
        Body: { private?: boolean; hideCollections?: boolean } | undefined;
      }>,
    ) => {
      if (request.params.id === "me") throw new HttpError(400, "INVALID_INPUT", "id: 'me' is reserved");
      requireSelfOrAdmin(request, request.params.id);
      await ledger.relations.upsertAccount(request.params.id, { private: request.body?.private });
      if (request.body?.hideCollections !== undefined)
        await setHideCollections(ledger.pool, request.params.id, request.body.hideCollections);
      return (await readAccount(ledger.pool, request.params.id))!;
    },
  );

  app.get(
    "/v1/accounts/:id",
    {
      config: { auth: "optional" },
      schema: {
        tags: ["relations"],
        summary:
          "An account's profile: its flags, and its counts unless it hides them from the viewer (no token: public data only)",
        security: optionalBearer,
        params: idParams,
        querystring: lagQuery,
        response: { 200: accountProfile, ...errors(400, 401, 404, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number } }>) => {
      const accountId = accountParam(request);
      const shown = await visibleAccount(request.caller, accountId);
      if (!collectionsVisible(request.caller, shown)) return shown;
      const followers = await followerCount(ledger.pool, accountId, request.query.allowedLag);
      return {
        ...shown,
        counts: {
          followers: followers.count,
          following: await followingCount(ledger.pool, accountId),
          lag: followers.lag,
          stale: followers.stale,
        },
      };
    },
  );

  app.put(
    "/v1/accounts/me/following/:id",
    writeSchema("Follow (a private account gets a request)", [409]),
    write("follow", (me, other) => ledger.relations.follow(me, other), "rejected-by-write"),
  );
  app.delete(
    "/v1/accounts/me/following/:id",
    writeSchema("Unfollow, or withdraw a request", []),
    write("unfollow", (me, other) => ledger.relations.unfollow(me, other), "checked-first"),
  );
  app.post(
    "/v1/accounts/me/follow-requests/:id/approve",
    writeSchema(
      "Approve a request (set-target-state: approving an approved follower is a NOOP; 409 NOT_PENDING when there is no request)",
      [409],
    ),
    write("approve", (me, other) => decideToTarget(me, other, true), "checked-first"),
  );
  app.post(
    "/v1/accounts/me/follow-requests/:id/reject",
    writeSchema(
      "Reject a request (set-target-state: rejecting where there is no follow is a NOOP; 409 NOT_PENDING for an active follower)",
      [409],
    ),
    write("reject", (me, other) => decideToTarget(me, other, false), "checked-first"),
  );
  app.put(
    "/v1/accounts/me/blocks/:id",
    writeSchema(
      "Block: removes both directions of the relation (always allowed, also towards an account that blocks me)",
      [409],
    ),
    write("block", (me, other) => ledger.relations.block(me, other), "allowed"),
  );
  app.delete(
    "/v1/accounts/me/blocks/:id",
    writeSchema("Unblock: restores nothing", []),
    write("unblock", (me, other) => ledger.relations.unblock(me, other), "checked-first"),
  );

  app.get(
    "/v1/accounts/me/relationships/:id",
    {
      config: { auth: "required" },
      schema: {
        tags: ["relations"],
        summary: "My relationship to an account, from the truth",
        security: bearer,
        params: idParams,
        response: { 200: relationshipRef, ...errors(400, 401, 404, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: IdRequest) => myRelationship(requireCaller(request).id, request.params.id),
  );

  app.get(
    "/v1/accounts/me/relationships",
    {
      config: { auth: "required" },
      schema: {
        tags: ["relations"],
        summary: `My relationships to up to ${MAX_RELATIONSHIPS} accounts (?id=a&id=b), from the truth; unknown ids are left out`,
        security: bearer,
        querystring: {
          type: "object",
          required: ["id"],
          additionalProperties: false,
          properties: { id: { type: "array", items: id, minItems: 1, maxItems: MAX_RELATIONSHIPS } },
        },
        response: {
          200: relationshipList,
          ...errors(400, 401, 404, 429),
        },
      },
      onRequest: opts.readRateLimit,
    },
    async (request: FastifyRequest<{ Querystring: { id: string[] } }>) => {
      const caller = requireCaller(request);
      if (!(await readAccount(ledger.pool, caller.id))) throw new AccountNotFoundError(caller.id);
      // An account that blocks me (and that I do not block) is left out, as an unknown id is.
      return (await relationships(ledger.pool, caller.id, request.query.id)).flatMap((r) => {
        const seen = asSeenByViewer(r);
        return seen ? [{ id: r.id, ...seen }] : [];
      });
    },
  );

  /** A list of an account (`:id`, or `me`) or of the caller (no params): auth, schema, the read budget. */
  const listSchema = (
    summary: string,
    page: { $ref: string },
    auth: "optional" | "required",
    statuses: number[] = [],
    replicaRead = false,
  ) => ({
    config: { auth, replicaRead },
    schema: {
      tags: ["relations"],
      summary,
      security: auth === "optional" ? optionalBearer : bearer,
      querystring: pageQuery,
      ...(auth === "optional" ? { params: idParams } : {}),
      response: { 200: page, ...errors(400, 401, 429, ...statuses) },
    },
    onRequest: opts.readRateLimit,
  });
  const ownListSchema = (summary: string, page: { $ref: string }) => listSchema(summary, page, "required");

  app.get(
    "/v1/accounts/:id/followers",
    listSchema(
      "Followers from the projection, newest first, without accounts in a block with the caller (cursor in the body and in Link rel=next)",
      followerPage,
      "optional",
      [403, 404],
      true,
    ),
    async (request: ListRequest, reply) => {
      const accountId = accountParam(request);
      await requireVisibleCollections(request.caller, accountId);
      const page = await app.readFrom(request, (pool) =>
        listFollowers(pool, accountId, { ...pageOptions(request.query), viewer: request.caller?.id ?? null }),
      );
      return sendPage(request, reply, page, request.query);
    },
  );

  app.get(
    "/v1/accounts/:id/following",
    listSchema(
      "Accounts this account follows, from the truth, newest first, without accounts in a block with the caller",
      followingPage,
      "optional",
      [403, 404],
      true,
    ),
    async (request: ListRequest, reply) => {
      const accountId = accountParam(request);
      await requireVisibleCollections(request.caller, accountId);
      const { accounts, nextCursor } = await app.readFrom(request, (pool) =>
        listFollowing(pool, accountId, { ...pageOptions(request.query), viewer: request.caller?.id ?? null }),
      );
      return sendPage(request, reply, { following: accounts, ...(nextCursor ? { nextCursor } : {}) }, request.query);
    },
  );

  app.get(
    "/v1/accounts/me/follow-requests",
    ownListSchema("Follow requests I have received and not decided, newest first", followRequestPage),
    async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
      const { accounts, nextCursor } = await listFollowRequests(
        ledger.pool,
        requireCaller(request).id,
        pageOptions(request.query),
      );
      return sendPage(
        request,
        reply,
        {
          requests: accounts.map((a) => ({ accountId: a.accountId, requestedAt: a.since })),
          ...(nextCursor ? { nextCursor } : {}),
        },
        request.query,
      );
    },
  );

  app.get(
    "/v1/accounts/me/blocks",
    ownListSchema("Accounts I block, newest block first", blockPage),
    async (request: FastifyRequest<{ Querystring: PageQuery }>, reply) => {
      const { accounts, nextCursor } = await listBlocks(
        ledger.pool,
        requireCaller(request).id,
        pageOptions(request.query),
      );
      return sendPage(request, reply, { blocks: accounts, ...(nextCursor ? { nextCursor } : {}) }, request.query);
    },
  );

  app.get(
    "/v1/accounts/:id/follower-count",
    {
      config: { auth: "optional", replicaRead: true },
      schema: {
        tags: ["relations"],
        summary: "Follower count from the projection, with its lag",
        security: optionalBearer,
        params: idParams,
        querystring: countQuery,
        response: { 200: followerCountSchema, ...errors(400, 401, 403, 404, 429) },
      },
      onRequest: opts.readRateLimit,
    },
    async (
      request: FastifyRequest<{ Params: { id: string }; Querystring: { allowedLag: number; exact: boolean } }>,
    ) => {
      const accountId = accountParam(request);
      await requireVisibleCollections(request.caller, accountId);
      return app.readFrom(request, (pool) => app.counts.read(FOLLOWER_COUNTS, accountId, request.query, pool));
    },
  );
}
