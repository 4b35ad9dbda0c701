import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import { buildApp, type BuildOptions } from "../../src/api/app.ts";
import { signToken } from "../../src/api/auth.ts";
import { LedgerMetrics } from "../../src/api/metrics.ts";
import { openCountLayer, type CountLayer } from "../../src/cache/count-layer.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

/**
 * End-to-end harness: a migrated test database, the ledger over it, and the API listening on
 * a real ephemeral port of 127.0.0.1. Requests go through fetch, so routing, parsing,
 * hooks, serialization and headers are exercised exactly as a client sees them. Consumers
 * never run by themselves: a test drains them explicitly where it needs the projection.
 */

export interface ApiResponse<T = unknown> {
  status: number;
  headers: Headers;
  text: string;
  /** Parsed JSON when the response is JSON, otherwise undefined. */
  body: T;
}

export interface RequestOptions {
  /** A bearer token; null or absent sends no Authorization header. */
  token?: string | null;
  /** Sent as JSON with content-type application/json. */
  json?: unknown;
  /** Sent as is (set content-type yourself in headers). */
  raw?: string;
  headers?: Record<string, string>;
  redirect?: RequestRedirect;
}

export interface ErrorBody {
  error: { code: string; message: string };
}

/** A caller with a minted token. */
export interface Client {
  readonly id: string;
  readonly token: string;
  get<T = unknown>(path: string, options?: RequestOptions): Promise<ApiResponse<T>>;
  put<T = unknown>(path: string, json?: unknown, options?: RequestOptions): Promise<ApiResponse<T>>;
  post<T = unknown>(path: string, json?: unknown, options?: RequestOptions): Promise<ApiResponse<T>>;
  delete<T = unknown>(path: string, options?: RequestOptions): Promise<ApiResponse<T>>;
}

export interface ApiHarness {
  db: TestDatabase;
  ledger: Ledger;
  app: FastifyInstance;
  baseUrl: string;
  secret: Uint8Array;
  token(userId: string, options?: { admin?: boolean; ttlSeconds?: number }): Promise<string>;
  request<T = unknown>(method: string, path: string, options?: RequestOptions): Promise<ApiResponse<T>>;
  /** A client acting as userId (with role admin when asked). */
  as(userId: string, options?: { admin?: boolean }): Promise<Client>;
  /** Drains every consumer (like counter, follower projector, comment counter, notifications) to the current end of every partition. */
  drain(): Promise<void>;
  /** The count layer (Redis when startApi got redisUrl; its workers are not started: tests drive them). */
  counts: CountLayer;
  close(): Promise<void>;
}

/** `app`: further options of buildApp (timeouts, token lifetime, the metrics token). */
export async function startApi(
  options: {
    partitions?: number;
    writesPerMinute?: number;
    readsPerMinute?: number;
    corsOrigins?: string[];
    poolSize?: number;
    redisUrl?: string;
    erasureBatchSize?: number;
    /** LEDGER_FEED_RETURN_REBUILD_MS of the ledger. */
    feedReturnRebuildMs?: number;
    app?: Partial<BuildOptions>;
  } = {},
): Promise<ApiHarness> {
  const db = await createTestDatabase({ partitions: options.partitions ?? 1, poolSize: options.poolSize ?? 10 });
  const secret = new Uint8Array(randomBytes(32));
  let app: FastifyInstance | undefined;
  let counts: CountLayer | undefined;
  try {
    const ledger = await openLedger(db.pool, {
      ...(options.erasureBatchSize === undefined ? {} : { erasureBatchSize: options.erasureBatchSize }),
      ...(options.feedReturnRebuildMs === undefined ? {} : { feedReturnRebuildMs: options.feedReturnRebuildMs }),
    });
    const metrics = new LedgerMetrics(db.pool);
    counts = await openCountLayer(db.pool, { redisUrl: options.redisUrl, registry: metrics.registry, localTtlMs: 0 });
    const layer = counts;
    app = await buildApp({
      ledger,
      jwtSecret: secret,
      logger: false,
      metrics,
      counts: counts.reader,
      countsState: counts.state,
      rateLimitRedis: counts.redis,
      ...(options.writesPerMinute !== undefined ? { writesPerMinute: options.writesPerMinute } : {}),
      ...(options.readsPerMinute !== undefined ? { readsPerMinute: options.readsPerMinute } : {}),
      ...(options.corsOrigins !== undefined ? { corsOrigins: options.corsOrigins } : {}),
      ...options.app,
    });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const { port } = app.server.address() as AddressInfo;
    const baseUrl = `http://127.0.0.1:${port}`;
    const started = app;
    let closed: Promise<void> | undefined;

    const request = async <T>(method: string, path: string, opts: RequestOptions = {}): Promise<ApiResponse<T>> => {
      const headers: Record<string, string> = { ...opts.headers };
      if (opts.token) headers.authorization = `Bearer ${opts.token}`;
      let body: string | undefined;
      if (opts.json !== undefined) {
        headers["content-type"] ??= "application/json";
        body = JSON.stringify(opts.json);
      } else if (opts.raw !== undefined) {
        body = opts.raw;
      }
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers,
        body: body ?? null,
        redirect: opts.redirect ?? "follow",
      });
      const text = await res.text();
      const isJson = (res.headers.get("content-type") ?? "").includes("application/json");
      return {
        status: res.status,
        headers: res.headers,
        text,
        body: (isJson && text.length > 0 ? JSON.parse(text) : undefined) as T,
      };
    };
    const token = (userId: string, o: { admin?: boolean; ttlSeconds?: number } = {}) => signToken(secret, userId, o);

    return {
      db,
      ledger,
      app: started,
      baseUrl,
      secret,
      token,
      request,
      counts: layer,
      async as(userId, o = {}) {
        const t = await token(userId, o);
        const withToken = (opts: RequestOptions = {}) => ({ token: t, ...opts });
        return {
          id: userId,
          token: t,
          get: (path, opts) => request("GET", path, withToken(opts)),
          put: (path, json, opts) =>
            request("PUT", path, withToken({ ...opts, ...(json === undefined ? {} : { json }) })),
          post: (path, json, opts) =>
            request("POST", path, withToken({ ...opts, ...(json === undefined ? {} : { json }) })),
          delete: (path, opts) => request("DELETE", path, withToken(opts)),
        };
      },
      async drain() {
        await ledger.likeConsumer.drain();
        await ledger.projector.drain();
        await ledger.commentConsumer.drain();
        await ledger.notifications.drain();
        await ledger.feed.drain();
      },
      close() {
        closed ??= (async () => {
          await started.close();
          await layer.close();
          await db.close();
        })();
        return closed;
      },
    };
  } catch (err) {
    await app?.close();
    await counts?.close();
    await db.close();
    throw err;
  }
}

/** The response is the error `code` with `status`, and its body is exactly {error: {code, message}}. */
export function assertError(res: ApiResponse, status: number, code: string, context = ""): ErrorBody {
  const where = `${context} ${res.status} ${res.text}`.trim();
  assert.equal(res.status, status, where);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/, where);
  const body = res.body as ErrorBody;
  assert.deepEqual(Object.keys(body ?? {}), ["error"], where);
  assert.deepEqual(Object.keys(body.error).sort(), ["code", "message"], where);
  assert.equal(body.error.code, code, where);
  assert.equal(typeof body.error.message, "string", where);
  assert.ok(body.error.message.length > 0, where);
  return body;
}

/** The response is a 200 (or `status`) whose JSON body is returned. */
export function ok<T>(res: ApiResponse<T>, status = 200, context = ""): T {
  assert.equal(res.status, status, `${context} ${res.status} ${res.text}`.trim());
  return res.body;
}

export interface LikeOutcome {
  outcome: "CHANGED" | "NOOP";
  liked: boolean;
  version: number;
  seq: number;
}

export interface RelationOutcome {
  outcome: "CHANGED" | "NOOP";
  state: "ACTIVE" | "PENDING" | "REMOVED";
  version: number;
  seq: number;
  reason?: string;
}

export interface PostJson {
  id: string;
  author: string;
  visibility: "PUBLIC" | "FOLLOWERS" | "SELF";
  body: string;
  aclToken: number;
  createdAt: string;
}

export interface PostRead {
  post: PostJson;
  decidedBy: string;
}

export interface LikeCount {
  count: number;
  lag: number;
  pendingForItem: number;
  stale: boolean;
}

/** The JSON of GET /v1/accounts/me/relationships/{id}: the library's Relationship without blockedBy (docs/api.md, "What a blocked user learns"). */
export type { ViewerRelationship as Relationship } from "../../src/relations/types.ts";

export interface LikerPage {
  likers: { userId: string; likedAt: string }[];
  nextCursor?: string;
}

export interface FollowerPage {
  followers: { accountId: string; since: string }[];
  nextCursor?: string;
}

export interface FollowingPage {
  following: { accountId: string; since: string }[];
  nextCursor?: string;
}

export interface BlockPage {
  blocks: { accountId: string; since: string }[];
  nextCursor?: string;
}

export interface LikedItemPage {
  likes: { itemId: string; likedAt: string }[];
  nextCursor?: string;
}

/** GET /v1/accounts/{id}: counts are absent when the account hides them from the viewer. */
export interface Profile {
  id: string;
  private: boolean;
  hideCollections: boolean;
  counts?: { followers: number; following: number; lag: number; stale: boolean };
}

/** Creates accounts through the API as an admin. */
export async function createAccounts(
  admin: Client,
  ids: readonly string[],
  options: { private?: boolean } = {},
): Promise<void> {
  for (const id of ids)
    ok(await admin.put(`/v1/accounts/${id}`, { private: options.private ?? false }), 200, `account ${id}`);
}
