import createFetchClient, { type Client, type MaybeOptionalInit } from "openapi-fetch";
import type { PathsWithMethod, SuccessResponseJSON } from "openapi-typescript-helpers";
import { errorOf } from "./errors.ts";
import type { paths } from "./schema.ts";

export interface LedgerClientOptions {
  /** Where the API answers, e.g. http://localhost:8080 (the paths start with /v1). */
  baseUrl: string;
  /** The bearer token (`social-ledger token`, or your identity provider's), or a function asked before each request. */
  token?: string | (() => string | Promise<string>);
  /** A fetch of your own (a proxy agent, a test double); default: the global fetch. */
  fetch?: (request: Request) => Promise<Response>;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

type GetPaths = PathsWithMethod<paths, "get">;

/** The GET routes that answer pages: their query takes a `cursor`. */
export type PagedPath = {
  [P in GetPaths]: paths[P]["get"] extends { parameters: { query?: { cursor?: string } } } ? P : never;
}[GetPaths];

/** The JSON body a route answers with on success. */
export type ResponseOf<P extends GetPaths> = SuccessResponseJSON<paths[P]["get"]>;

type PageInit<P extends PagedPath> = MaybeOptionalInit<paths[P], "get">;

/**
 * The API's client: openapi-fetch's typed `GET`, `PUT`, `POST`, `DELETE` over the paths of the
 * service's OpenAPI document (src/schema.ts), where every answer outside 2xx is thrown as a
 * LedgerApiError (RateLimitedError, ServiceUnavailableError), so a resolved call's `data` is the
 * success body; and `pages`/`items`, which follow a list's cursor to its end.
 */
export interface LedgerClient extends Client<paths> {
  /** Each page of a list, first to last: the route is called again with the previous page's `nextCursor` until a page has none. */
  pages<P extends PagedPath>(path: P, ...init: InitArgs<P>): AsyncGenerator<ResponseOf<P>, void, undefined>;
  /** Each entry of a list across its pages: `select` picks the entries of a page (e.g. `(p) => p.followers`). */
  items<P extends PagedPath, T>(
    path: P,
    select: (page: ResponseOf<P>) => readonly T[],
    ...init: InitArgs<P>
  ): AsyncGenerator<T, void, undefined>;
}

type InitArgs<P extends PagedPath> =
  Record<string, never> extends NonNullable<PageInit<P>> ? [init?: PageInit<P>] : [init: PageInit<P>];

export function createLedgerClient(options: LedgerClientOptions): LedgerClient {
  const api = createFetchClient<paths>({
    baseUrl: options.baseUrl,
    ...(options.fetch ? { fetch: options.fetch } : {}),
    ...(options.headers ? { headers: options.headers } : {}),
  });
  const { token } = options;
  api.use({
    async onRequest({ request }) {
      const value = typeof token === "function" ? await token() : token;
      if (value !== undefined) request.headers.set("authorization", `Bearer ${value}`);
      return request;
    },
    async onResponse({ response }) {
      if (response.ok) return undefined;
      const text = await response.clone().text();
      let body: unknown;
      try {
        body = text.length > 0 ? JSON.parse(text) : undefined;
      } catch {
        body = undefined;
      }
      throw errorOf(response, body);
    },
  });

  async function* pages<P extends PagedPath>(path: P, ...args: InitArgs<P>): AsyncGenerator<ResponseOf<P>> {
    const init = (args[0] ?? {}) as { params?: { query?: Record<string, unknown> } };
    let cursor: string | undefined;
    for (;;) {
      const query = { ...init.params?.query, ...(cursor === undefined ? {} : { cursor }) };
      const get = api.GET as (p: string, i: unknown) => Promise<{ data?: unknown }>;
      const { data } = await get(path, { ...init, params: { ...init.params, query } });
      yield data as ResponseOf<P>;
      cursor = (data as { nextCursor?: string }).nextCursor;
      if (cursor === undefined) return;
    }
  }

  async function* items<P extends PagedPath, T>(
    path: P,
    select: (page: ResponseOf<P>) => readonly T[],
    ...args: InitArgs<P>
  ): AsyncGenerator<T> {
    for await (const page of pages(path, ...args)) yield* select(page);
  }

  return Object.assign(api, { pages, items });
}
