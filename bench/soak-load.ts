/**
 * The soak's load (bench/soak.ts): the service's real mix over HTTP at a fixed offered rate,
 * open-loop. Request k is due at start + k / rate whether or not earlier ones were answered, and its
 * latency runs from that due time, so a stall shows as the waits it causes (no coordinated
 * omission). Likes and follows toggle a pair's state, posts are written and deleted again, comments
 * go to posts made at setup (never deleted: no comment meets a deleted post) and are deleted again
 * in part, and the reads are the counts, timelines, comment pages and notifications of the API.
 */
import { performance } from "node:perf_hooks";
import { signToken } from "../src/api/auth.ts";

/** Share (in percent) of each operation in the mix. */
export const MIX = {
  like: 30,
  follow: 10,
  post: 4,
  deletePost: 3,
  comment: 6,
  deleteComment: 2,
  readLikeCount: 12,
  readFollowerCount: 6,
  readTimeline: 10,
  readComments: 6,
  readUnread: 5,
  readAuthorPosts: 6,
} as const;
export type Operation = keyof typeof MIX;

/** The mix as 100 slots; request k takes slot k mod 100, in an order that spreads each kind. */
const SLOTS: Operation[] = (() => {
  const slots: Operation[] = [];
  for (const [op, share] of Object.entries(MIX) as [Operation, number][])
    for (let i = 0; i < share; i++) slots.push(op);
  if (slots.length !== 100) throw new Error(`the mix adds up to ${slots.length}, not 100`);
  // A stride coprime with 100 interleaves the kinds.
  return slots.map((_, k) => slots[(k * 37) % 100]!);
})();

/** Operations that change something (the rest read). */
const WRITES = new Set<Operation>(["like", "follow", "post", "deletePost", "comment", "deleteComment"]);

/** Events per second the mix writes into the outboxes the retention prunes, at `rate` requests/s (an upper bound). */
export function outboxEventsPerSecond(rate: number): number {
  return (rate * (MIX.like + MIX.follow + MIX.comment + MIX.deleteComment)) / 100;
}

export interface LoadWindow {
  /**
   * Latency (ms, from each request's due time) of the requests answered in the window, by
   * operation of the mix: which kind a p99 that moves belongs to (windowLatencies pools them).
   */
  byKind: Partial<Record<Operation, number[]>>;
  requests: number;
  writes: number;
  errors: number;
}

const emptyWindow = (): LoadWindow => ({ byKind: {}, requests: 0, writes: 0, errors: 0 });

/** Every latency of a window, whatever its operation. */
export function windowLatencies(byKind: LoadWindow["byKind"]): number[] {
  return Object.values(byKind).flat();
}

interface Request {
  method: "GET" | "PUT" | "POST" | "DELETE";
  path: string;
  token: string;
  body?: unknown;
  /** What to record once answered with 2xx (a post's or comment's id). */
  then?: (body: unknown) => void;
}

/** A deterministic pseudo-random sequence (xorshift32): the same run sends the same requests. */
function sequence(seed: number): () => number {
  let x = seed | 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

export class SoakLoad {
  private readonly random = sequence(34);
  private readonly liked = new Set<string>();
  private readonly following = new Set<string>();
  /** Posts and comments written during the run, oldest first, with their author: what the deletes take. */
  private readonly posts: { id: string; author: string }[] = [];
  private readonly comments: { id: string; author: string }[] = [];
  private window: LoadWindow = emptyWindow();
  private timer: NodeJS.Timeout | undefined;
  private inFlight = 0;
  /** Requests not sent because MAX_IN_FLIGHT were unanswered (counted as errors). */
  shed = 0;
  readonly firstErrors: string[] = [];
  readonly totals = { requests: 0, errors: 0 };

  private constructor(
    private readonly baseUrl: string,
    private readonly users: readonly string[],
    private readonly tokens: ReadonlyMap<string, string>,
    readonly adminToken: string,
    private readonly items: readonly string[],
    private readonly fixedPosts: readonly string[],
  ) {}

  /** Accounts (each by its own token), items (as admin) and one post per account that comments go to. */
  static async prepare(baseUrl: string, secret: string, options: { users: number; items: number }): Promise<SoakLoad> {
    const key = new TextEncoder().encode(secret);
    const adminToken = await signToken(key, "soak-admin", { admin: true });
    const users = Array.from({ length: options.users }, (_, i) => `soak-user-${i}`);
    const tokens = new Map(await Promise.all(users.map(async (u) => [u, await signToken(key, u)] as const)));
    const items = Array.from({ length: options.items }, (_, i) => `soak-item-${i}`);
    const call = async (method: string, path: string, token: string, body?: unknown) => {
      const res = await fetch(new URL(path, baseUrl), {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`setup ${method} ${path}: ${res.status} ${text}`);
      return text ? (JSON.parse(text) as Record<string, unknown>) : {};
    };
    // Sixteen at a time: the setup is not measured.
    const inParallel = async <T>(list: readonly T[], each: (x: T) => Promise<void>) => {
      let next = 0;
      const lane = async () => {
        while (next < list.length) await each(list[next++]!);
      };
      await Promise.all(Array.from({ length: 16 }, lane));
    };
    const fixedPost = new Map<string, string>();
    await inParallel(users, async (user) => {
      await call("PUT", `/v1/accounts/${user}`, tokens.get(user)!);
      const post = await call("POST", "/v1/posts", tokens.get(user)!, { visibility: "PUBLIC", body: `${user}'s post` });
      fixedPost.set(user, String(post.id));
    });
    await inParallel(items, (item) => call("PUT", `/v1/items/${item}`, adminToken).then(() => undefined));
    const fixedPosts = users.map((u) => fixedPost.get(u)!);
    return new SoakLoad(baseUrl, users, tokens, adminToken, items, fixedPosts);
  }

  private pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.random() * list.length)]!;
  }

  private request(op: Operation): Request {
    const user = this.pick(this.users);
    const token = this.tokens.get(user)!;
    switch (op) {
      case "like": {
        const item = this.pick(this.items);
        const pair = `${user} ${item}`;
        const like = !this.liked.has(pair);
        if (like) this.liked.add(pair);
        else this.liked.delete(pair);
        return { method: like ? "PUT" : "DELETE", path: `/v1/items/${item}/likes/me`, token };
      }
      case "follow": {
        let other = this.pick(this.users);
        if (other === user) other = this.users[(this.users.indexOf(user) + 1) % this.users.length]!;
        const pair = `${user} ${other}`;
        const follow = !this.following.has(pair);
        if (follow) this.following.add(pair);
        else this.following.delete(pair);
        return { method: follow ? "PUT" : "DELETE", path: `/v1/accounts/me/following/${other}`, token };
      }
      case "post":
        return {
          method: "POST",
          path: "/v1/posts",
          token,
          body: { visibility: "PUBLIC", body: `soak post ${this.totals.requests}` },
          then: (body) => this.posts.push({ id: String((body as { id: string }).id), author: user }),
        };
      case "deletePost": {
        const post = this.posts.shift();
        return post
          ? { method: "DELETE", path: `/v1/posts/${post.id}`, token: this.tokens.get(post.author)! }
          : { method: "GET", path: `/v1/accounts/${user}/posts?limit=20`, token };
      }
      case "comment":
        return {
          method: "POST",
          path: `/v1/posts/${this.pick(this.fixedPosts)}/comments`,
          token,
          body: { body: `soak comment ${this.totals.requests}` },
          then: (body) => this.comments.push({ id: String((body as { id: string }).id), author: user }),
        };
      case "deleteComment": {
        const comment = this.comments.shift();
        return comment
          ? { method: "DELETE", path: `/v1/comments/${comment.id}`, token: this.tokens.get(comment.author)! }
          : { method: "GET", path: `/v1/posts/${this.pick(this.fixedPosts)}/comments?limit=20`, token };
      }
      case "readLikeCount":
        return { method: "GET", path: `/v1/items/${this.pick(this.items)}/like-count`, token };
      case "readFollowerCount":
        return { method: "GET", path: `/v1/accounts/${this.pick(this.users)}/follower-count`, token };
      case "readTimeline":
        return { method: "GET", path: "/v1/timelines/home?limit=20", token };
      case "readComments":
        return { method: "GET", path: `/v1/posts/${this.pick(this.fixedPosts)}/comments?limit=20`, token };
      case "readUnread":
        return { method: "GET", path: "/v1/notifications/unread-count", token };
      case "readAuthorPosts":
        return { method: "GET", path: `/v1/accounts/${this.pick(this.users)}/posts?limit=20`, token };
    }
  }

  private async send(op: Operation, dueAt: number): Promise<void> {
    const req = this.request(op);
    this.inFlight++;
    let failure: string | undefined;
    try {
      const res = await fetch(new URL(req.path, this.baseUrl), {
        method: req.method,
        headers: {
          authorization: `Bearer ${req.token}`,
          ...(req.body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(req.body === undefined ? {} : { body: JSON.stringify(req.body) }),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      if (res.ok) req.then?.(text ? JSON.parse(text) : {});
      else failure = `${req.method} ${req.path}: ${res.status} ${text.slice(0, 300)}`;
    } catch (err) {
      failure = `${req.method} ${req.path}: ${err instanceof Error ? err.message : String(err)}`;
    } finally {
      this.inFlight--;
    }
    const latency = performance.now() - dueAt;
    (this.window.byKind[op] ??= []).push(latency);
    this.window.requests++;
    if (WRITES.has(op)) this.window.writes++;
    this.totals.requests++;
    if (failure !== undefined) this.recordError(failure);
  }

  private recordError(message: string): void {
    this.window.errors++;
    this.totals.errors++;
    if (this.firstErrors.length < 10) this.firstErrors.push(message);
  }

  /**
   * Requests per second the service answers with this mix when pushed: `connections` senders,
   * each sending the mix's next request as soon as its previous one is answered, for `seconds`.
   * The calibration's latencies are dropped; its errors count with the run's.
   */
  async measureCapacity(seconds: number, connections: number): Promise<number> {
    const startedAt = performance.now();
    const endAt = startedAt + seconds * 1000;
    let next = 0;
    let answered = 0;
    const sender = async (): Promise<void> => {
      while (performance.now() < endAt) {
        await this.send(SLOTS[next++ % SLOTS.length]!, performance.now());
        answered++;
      }
    };
    await Promise.all(Array.from({ length: connections }, sender));
    this.take();
    return answered / ((performance.now() - startedAt) / 1000);
  }

  /** Starts sending `rate` requests per second until stop(). */
  start(rate: number, maxInFlight = 2000): void {
    const startedAt = performance.now();
    let next = 0;
    // Every tick sends whatever has come due since the last one.
    this.timer = setInterval(() => {
      const due = Math.floor(((performance.now() - startedAt) * rate) / 1000);
      for (; next < due; next++) {
        const dueAt = startedAt + (next * 1000) / rate;
        if (this.inFlight >= maxInFlight) {
          this.shed++;
          this.recordError(`shed: ${maxInFlight} requests unanswered`);
          continue;
        }
        void this.send(SLOTS[next % SLOTS.length]!, dueAt);
      }
    }, 5);
  }

  /** Stops sending and waits (bounded) for the requests in flight. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    const deadline = Date.now() + 35_000;
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  }

  /** What was answered since the previous call. */
  take(): LoadWindow {
    const window = this.window;
    this.window = emptyWindow();
    return window;
  }
}
