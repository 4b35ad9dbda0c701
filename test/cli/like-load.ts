/**
 * Concurrent like/unlike clients over HTTP, for fault-injection tests of the service. Each
 * client is one user sending one request at a time and owns its (user, item) pairs, so the
 * expected end state does not depend on how the clients interleave: a pair's state is the
 * target of its last acknowledged request. A request answered 503 is repeated until it is
 * acknowledged (likes and unlikes set a target state, so a repeat is safe even if the 503'd
 * attempt had committed); any other status is recorded as unexpected.
 */
import { performance } from "node:perf_hooks";
import { signToken } from "../../src/api/auth.ts";
import assert from "node:assert/strict";
import type { TestContext } from "node:test";
import { createPool } from "../../src/db/pool.ts";
import { httpClient, pollUntil, runCli } from "./cli-child.ts";

/**
 * What a service under this load must be started with: each client repeats a 503'd request every
 * 25 ms for as long as an outage lasts, and every attempt counts against the per-user write limit
 * (600 a minute by default), so a long outage would otherwise end in 429s the test did not cause.
 */
export const LOAD_SERVICE_ENV = { LEDGER_WRITES_PER_MINUTE: "1000000" } as const;

export interface LoadFigures {
  acknowledged: number;
  unavailable: number;
  /** Status codes other than 200 and 503, and 503s without our error code (DATABASE_UNAVAILABLE, DATABASE_DISK_FULL, SHUTTING_DOWN) or Retry-After. */
  unexpected: string[];
  /** Acknowledged requests sent after the first 503: proof that service resumed. */
  acknowledgedAfterOutage: number;
  /** Refused or dropped connections, when the test expects the server to go away. */
  networkErrors: number;
  /** The longest any request took to be answered (any status), in ms; a test may reset it to 0 to measure a window. */
  slowestMs: number;
}

export class LikeLoad {
  readonly figures: LoadFigures = {
    acknowledged: 0,
    unavailable: 0,
    unexpected: [],
    acknowledgedAfterOutage: 0,
    networkErrors: 0,
    slowestMs: 0,
  };
  /** Set when the server is expected to exit: a refused connection then ends a client instead of failing the test. */
  tolerateNetworkErrors = false;
  /** user -> item -> liked, the state of every pair after its last acknowledged request. */
  readonly expected = new Map<string, Map<string, boolean>>();
  /** Pairs whose last request was never acknowledged (the load stopped, or the server went away): either state is right. */
  readonly inDoubt = new Set<string>();
  private running = false;
  private loops: Promise<void>[] = [];

  private constructor(
    private readonly call: ReturnType<typeof httpClient>,
    private readonly tokens: Map<string, string>,
    readonly items: readonly string[],
  ) {}

  /** Creates the items (as admin) and one token per client. */
  static async prepare(
    address: string,
    secret: string,
    options: { clients: number; items: number },
  ): Promise<LikeLoad> {
    const key = new TextEncoder().encode(secret);
    const call = httpClient(address);
    const admin = await signToken(key, "root", { admin: true });
    const items = Array.from({ length: options.items }, (_, i) => `load-item-${i}`);
    for (const item of items) {
      const res = await call("PUT", `/v1/items/${item}`, admin);
      if (res.status !== 200) throw new Error(`creating ${item}: ${res.status} ${JSON.stringify(res.body)}`);
    }
    const users = Array.from({ length: options.clients }, (_, c) => `load-user-${c}`);
    const tokens = new Map(await Promise.all(users.map(async (u) => [u, await signToken(key, u)] as const)));
    return new LikeLoad(call, tokens, items);
  }

  start(): void {
    this.running = true;
    this.loops = [...this.tokens.keys()].map((user) => this.client(user));
  }

  private async client(user: string): Promise<void> {
    const token = this.tokens.get(user)!;
    const state = new Map<string, boolean>();
    this.expected.set(user, state);
    for (let op = 0; this.running; op++) {
      const item = this.items[op % this.items.length]!;
      const like = Math.floor(op / this.items.length) % 2 === 0;
      for (;;) {
        let res: { status: number; body: Record<string, unknown>; retryAfter: string | null };
        try {
          res = await this.send(like ? "PUT" : "DELETE", `/v1/items/${item}/likes/me`, token);
        } catch (err) {
          if (this.tolerateNetworkErrors) this.figures.networkErrors++;
          else this.figures.unexpected.push(`network: ${(err as Error).message}`);
          return this.leaveInDoubt(state, user, item);
        }
        if (res.status === 200) {
          state.set(item, like);
          this.figures.acknowledged++;
          if (this.figures.unavailable > 0) this.figures.acknowledgedAfterOutage++;
          break;
        }
        const code = (res.body.error as { code?: string } | undefined)?.code;
        if (
          res.status === 503 &&
          (code === "DATABASE_UNAVAILABLE" || code === "SHUTTING_DOWN" || code === "DATABASE_DISK_FULL") &&
          res.retryAfter !== null
        ) {
          this.figures.unavailable++;
        } else {
          this.figures.unexpected.push(`${res.status} ${JSON.stringify(res.body)} retry-after=${res.retryAfter}`);
          if (this.figures.unexpected.length > 20) return this.leaveInDoubt(state, user, item);
        }
        // Pacing of a client that was told to come back later, not synchronisation.
        await new Promise((resolve) => setTimeout(resolve, 25));
        if (!this.running) return this.leaveInDoubt(state, user, item);
      }
    }
  }

  private leaveInDoubt(state: Map<string, boolean>, user: string, item: string): void {
    state.delete(item);
    this.inDoubt.add(`${user}/${item}`);
  }

  private async send(method: string, urlPath: string, token: string) {
    const started = performance.now();
    const res = await this.call(method, urlPath, token);
    this.figures.slowestMs = Math.max(this.figures.slowestMs, performance.now() - started);
    return { status: res.status, body: res.body, retryAfter: res.headers.get("retry-after") };
  }

  /** Waits (bounded) until `done` holds for the figures. */
  until(what: string, done: (f: LoadFigures) => boolean, ms = 60_000): Promise<LoadFigures> {
    return pollUntil(
      what,
      async () => this.figures,
      (f) => done(f) || f.unexpected.length > 0,
      ms,
    ).then((f) => {
      if (f.unexpected.length > 0 && !done(f))
        throw new Error(`${what}: unexpected answers: ${f.unexpected.slice(0, 5).join("; ")}`);
      return f;
    });
  }

  async stop(): Promise<LoadFigures> {
    this.running = false;
    await Promise.all(this.loops);
    return this.figures;
  }

  /** Pairs whose stored state differs from the last acknowledged request: lost or resurrected writes. */
  async mismatches(read: (user: string, item: string) => Promise<boolean>): Promise<string[]> {
    const wrong: string[] = [];
    for (const [user, state] of this.expected) {
      for (const [item, liked] of state)
        if ((await read(user, item)) !== liked) wrong.push(`${user}/${item} expected liked=${liked}`);
    }
    return wrong;
  }
}

/**
 * With independent SQL (the superuser's `adminUrl`): every acknowledged like/unlike of `load` is
 * the state of its pair, counts read through the service (allowedLag=0) reach the facts, and
 * `audit` (run with `env`, pointed at `adminUrl`) is clean.
 */
export async function verifyLikesKept(
  t: TestContext,
  load: LikeLoad,
  service: { adminUrl: string; address: string; secret: string; env: NodeJS.ProcessEnv },
): Promise<void> {
  const pool = createPool({ connectionString: service.adminUrl, max: 2 });
  try {
    const { rows } = await pool.query<{ user_id: string; item_id: string; liked: boolean }>(
      "SELECT user_id, item_id, liked FROM like_fact WHERE user_id LIKE 'load-user-%'",
    );
    const stored = new Map(rows.map((r) => [`${r.user_id}/${r.item_id}`, r.liked]));
    assert.deepEqual(
      await load.mismatches(async (user, item) => stored.get(`${user}/${item}`) ?? false),
      [],
      "acknowledged writes lost or resurrected",
    );
    const facts = await pool.query<{ item_id: string; n: number }>(
      "SELECT item_id, count(*) FILTER (WHERE liked)::int AS n FROM like_fact WHERE item_id LIKE 'load-item-%' GROUP BY item_id",
    );
    const call = httpClient(service.address);
    const reader = await signToken(new TextEncoder().encode(service.secret), "reader");
    for (const { item_id: item, n } of facts.rows) {
      await pollUntil(
        `count of ${item} caught up`,
        () => call<{ count: number; stale: boolean }>("GET", `/v1/items/${item}/like-count?allowedLag=0`, reader),
        (res) => res.status === 200 && res.body.count === n && !res.body.stale,
        60_000,
      );
    }
    t.diagnostic(
      `note pairs in doubt (last request unanswered)=${load.inDoubt.size}; items checked=${facts.rows.length}`,
    );
  } finally {
    await pool.end();
  }
  const audit = await runCli(["audit"], { ...service.env, DATABASE_URL: service.adminUrl });
  assert.equal(audit.code, 0, audit.stdout + audit.stderr);
}
