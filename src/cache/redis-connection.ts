import { createClient, createCluster } from "redis";

/** Raised at start when Redis could evict count keys: a count must never silently shrink. */
export class EvictingRedisError extends Error {
  constructor(readonly policy: string) {
    super(
      `Redis maxmemory-policy is ${policy}: it may evict count keys and counts would silently shrink. ` +
        "Set maxmemory-policy to noeviction or a volatile-* policy, or start with LEDGER_REDIS_ALLOW_EVICTION=1 to accept it.",
    );
    this.name = "EvictingRedisError";
  }
}

/** Raised at start when REDIS_URL cannot be read (a cluster URL without nodes, an unknown scheme). */
export class RedisUrlError extends Error {
  readonly code = "REDIS_URL_INVALID";
  constructor(message: string) {
    super(message);
    this.name = "RedisUrlError";
  }
}

/** A command Redis did not answer within the deadline: it hangs (stopped, partitioned) or is overloaded. */
export class RedisTimeoutError extends Error {
  readonly code = "REDIS_TIMEOUT";
  constructor(readonly ms: number) {
    super(`Redis did not answer within ${ms} ms`);
    this.name = "RedisTimeoutError";
  }
}

/** Refused without asking Redis: it missed a deadline recently and has not answered a probe since, or is not connected yet. */
export class RedisUnavailableError extends Error {
  readonly code = "REDIS_UNAVAILABLE";
  constructor(message = "Redis missed a command deadline and has not answered since: not waiting for it") {
    super(message);
    this.name = "RedisUnavailableError";
  }
}

/** Redis did not become usable within the wait (connection refused, unreachable host, hung server). */
export class RedisUnreachableError extends Error {
  readonly code = "REDIS_UNREACHABLE";
  constructor(
    readonly address: string,
    readonly ms: number,
    reason: string | undefined,
  ) {
    super(`Redis at ${address} did not answer within ${ms} ms${reason ? ` (last error: ${reason})` : ""}`);
    this.name = "RedisUnreachableError";
  }
}

export interface RedisOptions {
  /** Per-command timeout; a read that takes longer falls back to PostgreSQL. */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** TCP keepalive's idle time before the first probe (default 10 s); 0: off. */
  keepAliveMs?: number;
  /** Start even when maxmemory-policy is allkeys-* (LEDGER_REDIS_ALLOW_EVICTION). */
  allowEviction?: boolean;
  /** connectRedis: how long to wait for Redis to become usable before RedisUnreachableError (default 5 s). */
  connectWaitMs?: number;
}

/**
 * The count layer's view of Redis: one node or a Redis Cluster, chosen by REDIS_URL's scheme
 * (`redis://host:port` or `redis+cluster://host:port,host:port`). Every command names its key
 * first (args[1], or the first key of an EVAL), which is how a cluster routes it; on one node
 * that changes nothing. Commands issued in the same tick share one write per node connection,
 * so a fan-out over many keys costs one round trip per node.
 */
export interface RedisClient {
  readonly topology: "node" | "cluster";
  /** Every node (every master of a cluster) is connected and no command missed its deadline since the last answer: "degraded" otherwise. */
  readonly isReady: boolean;
  sendCommand<T>(args: readonly string[]): Promise<T>;
  hGetAll(key: string): Promise<Record<string, string>>;
  hSet(key: string, fields: Record<string, string>): Promise<unknown>;
  /** args on every node (every master), answers in the same order as `nodes()`. */
  onEveryNode<T>(args: readonly string[]): Promise<T[]>;
  /** host:port of every node (every master). */
  nodes(): string[];
  flushAll(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The offline queue is disabled: a command issued while a connection is down fails at once
 * instead of being replayed after reconnection, because a replayed increment is a double count
 * (the count scripts are idempotent per event, but a blind replay must not be the mechanism).
 * Reconnection retries in the background with a short capped backoff; while a node is down the
 * reads of its keys fall back to PostgreSQL.
 */
const reconnectStrategy = (retries: number) => Math.min(50 * 2 ** Math.min(retries, 5), 1000);

/** The first key of a command, which decides its slot on a cluster: EVAL's KEYS[1], else args[1]. */
export function routingKey(args: readonly string[]): string | undefined {
  const name = args[0]?.toUpperCase();
  if (name === "EVAL" || name === "EVALSHA") return Number(args[2]) > 0 ? args[3] : undefined;
  return args[1];
}

/** `redis+cluster://[user:password@]host:port,host:port` (or `rediss+cluster://` for TLS): the seed nodes of a cluster. */
export function parseClusterUrl(
  url: string,
): { tls: boolean; username?: string; password?: string; nodes: { host: string; port: number }[] } | undefined {
  const match = /^(rediss?)\+cluster:\/\/(?:([^@]*)@)?([^/?#]*)/.exec(url);
  if (!match) return undefined;
  const [, scheme, auth, hosts] = match;
  const nodes = hosts!
    .split(",")
    .filter((h) => h.length > 0)
    .map((h) => {
      const at = h.lastIndexOf(":");
      const port = at < 0 ? 6379 : Number(h.slice(at + 1));
      if (!Number.isInteger(port) || port <= 0 || port > 65535)
        throw new RedisUrlError(`REDIS_URL: bad port in cluster node "${h}"`);
      return { host: at < 0 ? h : h.slice(0, at), port };
    });
  if (nodes.length === 0) throw new RedisUrlError("REDIS_URL: a redis+cluster:// URL needs at least one host:port");
  let username: string | undefined;
  let password: string | undefined;
  if (auth !== undefined) {
    const colon = auth.indexOf(":");
    username = decodeURIComponent(colon < 0 ? auth : auth.slice(0, colon)) || undefined;
    password = colon < 0 ? undefined : decodeURIComponent(auth.slice(colon + 1));
  }
  return { tls: scheme === "rediss", username, password, nodes };
}

function toRecord(reply: unknown): Record<string, string> {
  if (Array.isArray(reply)) {
    const out: Record<string, string> = {};
    for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
    return out;
  }
  if (reply instanceof Map) return Object.fromEntries([...reply].map(([k, v]) => [String(k), String(v)]));
  return Object.fromEntries(Object.entries((reply ?? {}) as Record<string, unknown>).map(([k, v]) => [k, String(v)]));
}

const hSetArgs = (key: string, fields: Record<string, string>) => ["HSET", key, ...Object.entries(fields).flat()];

/** One node or a cluster, not connected yet; `watch` hears every event that may change readiness (with its error, if any). */
interface Connectable {
  redis: RedisClient;
  connect(): Promise<void>;
  watch(listener: (err?: Error) => void): void;
}

/** node-redis's socket keepalive options; the command deadlines (withDeadline) bound a busy connection, keepalive an idle one. */
function keepAlive(options: RedisOptions): { keepAlive: boolean; keepAliveInitialDelay?: number } {
  const ms = options.keepAliveMs ?? 10_000;
  return ms > 0 ? { keepAlive: true, keepAliveInitialDelay: ms } : { keepAlive: false };
}

function singleNode(url: string, options: RedisOptions): Connectable {
  const client = createClient({
    url,
    disableOfflineQueue: true,
    commandOptions: { timeout: options.commandTimeoutMs ?? 200 },
    socket: { connectTimeout: options.connectTimeoutMs ?? 1000, reconnectStrategy, ...keepAlive(options) },
  });
  // Without a listener node-redis rethrows connection errors as unhandled; the state is
  // visible through isReady and the metrics.
  client.on("error", () => {});
  const send = <T>(args: readonly string[]) => client.sendCommand(args as string[]) as Promise<T>;
  const parsed = new URL(url);
  const address = `${parsed.hostname || "127.0.0.1"}:${parsed.port || "6379"}`;
  const redis: RedisClient = {
    topology: "node",
    get isReady() {
      return client.isReady;
    },
    sendCommand: send,
    hGetAll: async (key) => toRecord(await send(["HGETALL", key])),
    hSet: (key, fields) => send(hSetArgs(key, fields)),
    onEveryNode: async <T>(args: readonly string[]) => [await send<T>(args)],
    nodes: () => [address],
    flushAll: async () => {
      await send(["FLUSHALL"]);
    },
    close: () => closeWithin(client),
  };
  // node-redis retries a refused or lost connection itself (reconnectStrategy), so connect()
  // resolves only once it is connected.
  return {
    redis,
    connect: async () => void (await client.connect()),
    watch: (listener) => {
      for (const event of ["ready", "end", "reconnecting"]) client.on(event, () => listener());
      client.on("error", (err: Error) => listener(err));
    },
  };
}

/**
 * close() waits for every command in flight, which a hung Redis never answers: after 1 s the
 * connections are destroyed. A client that is not connected (still trying) is destroyed at once:
 * with the offline queue disabled nothing can be in flight, and close() would wait for the connect.
 */
async function closeWithin(client: {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  close(): Promise<unknown>;
  destroy(): unknown;
}): Promise<void> {
  if (!client.isOpen) return;
  if (!client.isReady) {
    try {
      client.destroy();
    } catch {
      // already closing
    }
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  const closed = await Promise.race([
    client.close().then(
      () => true,
      () => true,
    ),
    new Promise<false>((resolve) => (timer = setTimeout(resolve, 1000, false))),
  ]);
  clearTimeout(timer);
  if (!closed) client.destroy();
}

function cluster(seed: NonNullable<ReturnType<typeof parseClusterUrl>>, options: RedisOptions): Connectable {
  const socket = {
    connectTimeout: options.connectTimeoutMs ?? 1000,
    reconnectStrategy,
    ...keepAlive(options),
    ...(seed.tls ? { tls: true as const } : {}),
  };
  const client = createCluster({
    rootNodes: seed.nodes.map((n) => ({ socket: { ...socket, host: n.host, port: n.port } })),
    defaults: { disableOfflineQueue: true, username: seed.username, password: seed.password, socket },
    commandOptions: { timeout: options.commandTimeoutMs ?? 200 },
    // A master that stops answering makes its node client reconnect; after this long the client
    // asks the cluster for its topology again, so a promoted replica is found without waiting
    // for a MOVED (there is none while the old master is unreachable).
    topologyRefreshOnReconnectionAttemptStrategy: 300,
  });
  client.on("error", () => {});
  client.on("node-error", () => {});
  const send = <T>(args: readonly string[]) =>
    client.sendCommand(routingKey(args), false, args as string[]) as Promise<T>;
  const masters = () => (client.isReady ? client.masters : []);
  const onEveryNode = <T>(args: readonly string[]) =>
    Promise.all(masters().map(async (m) => (await client.nodeClient(m)).sendCommand(args as string[]) as Promise<T>));
  const redis: RedisClient = {
    topology: "cluster",
    get isReady() {
      const all = masters();
      return all.length > 0 && all.every((m) => m.client?.isReady === true);
    },
    sendCommand: send,
    hGetAll: async (key) => toRecord(await send(["HGETALL", key])),
    hSet: (key, fields) => send(hSetArgs(key, fields)),
    onEveryNode,
    nodes: () => masters().map((m) => m.address),
    flushAll: async () => {
      await onEveryNode(["FLUSHALL"]);
    },
    close: () => closeWithin(client),
  };
  // The cluster client rejects connect() when no seed node answers: openRedis tries again.
  return {
    redis,
    connect: async () => void (await client.connect()),
    watch: (listener) => {
      for (const event of ["connect", "disconnect", "node-ready", "node-reconnecting", "node-disconnect"])
        client.on(event, () => listener());
      client.on("node-error", (err: Error) => listener(err));
    },
  };
}

/** A Redis client that is usable at once and connects in the background (openRedis). */
export interface OpenedRedis {
  /** Refuses commands (RedisUnavailableError) until connected and its eviction policy is accepted. */
  redis: RedisClient;
  /** Resolves once usable; rejects with EvictingRedisError (the client is closed then) or when closed first. */
  ready: Promise<void>;
  /** Whenever redis.isReady changes: the new value and the last error seen. */
  onChange(listener: (ready: boolean, reason: string | undefined) => void): void;
  /** The last connection or command error, for messages. */
  lastError(): string | undefined;
  /** Where it connects, without credentials. */
  address: string;
}

/** REDIS_URL's hosts without user and password, for messages. */
function displayAddress(url: string, seed: ReturnType<typeof parseClusterUrl>): string {
  if (seed) return seed.nodes.map((n) => `${n.host}:${n.port}`).join(",");
  try {
    const parsed = new URL(url);
    return `${parsed.hostname || "127.0.0.1"}:${parsed.port || "6379"}`;
  } catch {
    return "(unparsable REDIS_URL)";
  }
}

/**
 * Opens the client and connects in the background, so a Redis that is down at start never
 * holds up the service: until it is connected, and its maxmemory-policy checked,
 * every command is refused at once and reads fall back to PostgreSQL. Connection attempts go on,
 * 50 ms to 1 s apart, until it answers or the client is closed.
 */
export function openRedis(url: string, options: RedisOptions = {}): OpenedRedis {
  const seed = parseClusterUrl(url);
  const { redis: unguarded, connect, watch } = seed ? cluster(seed, options) : singleNode(url, options);
  const timeoutMs = options.commandTimeoutMs ?? 200;
  const listeners: ((ready: boolean, reason: string | undefined) => void)[] = [];
  const gate = {
    admitted: false,
    closed: false,
    lastError: undefined as string | undefined,
    reported: false,
    wake: () => {},
  };
  // Deferred: node-redis emits some events before its own isReady reflects them.
  const changed = () =>
    setImmediate(() => {
      const now = redis.isReady;
      if (now === gate.reported) return;
      gate.reported = now;
      for (const listener of listeners) listener(now, gate.lastError);
    });
  const noted = (err?: unknown) => {
    if (err !== undefined) gate.lastError = err instanceof Error ? err.message : String(err);
    changed();
  };
  watch(noted);
  const redis = withDeadline(unguarded, timeoutMs, {
    admitted: () => gate.admitted,
    onChange: noted,
    close: () => {
      gate.closed = true;
      gate.wake();
    },
  });
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref();
      gate.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  const untilClosed = async <T>(attempt: () => Promise<T>): Promise<T> => {
    for (let backoff = 50; ; backoff = Math.min(backoff * 2, 1000)) {
      if (gate.closed) throw new RedisUnavailableError("the Redis client was closed before it connected");
      try {
        return await attempt();
      } catch (err) {
        noted(err);
        if (gate.closed) throw err;
        await pause(backoff);
      }
    }
  };
  const ready = (async () => {
    await untilClosed(connect);
    // Every master must keep count keys: one evicting node would shrink the counts whose buckets it holds.
    const policies = await untilClosed(() => withinMs(maxmemoryPolicies(unguarded), timeoutMs));
    const evicting = policies.find((p) => p.startsWith("allkeys-"));
    if (evicting && !options.allowEviction) {
      await redis.close().catch(() => {});
      throw new EvictingRedisError(evicting);
    }
    gate.admitted = true;
    changed();
  })();
  ready.catch(() => {});
  return {
    redis,
    ready,
    onChange: (listener) => void listeners.push(listener),
    lastError: () => gate.lastError,
    address: displayAddress(url, seed),
  };
}

/** `promise`, or a RedisTimeoutError after `ms`. */
async function withinMs<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new RedisTimeoutError(ms)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether `promise` resolved within `ms` (false: still pending); rethrows its rejection. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise.then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** A usable client within `connectWaitMs` (default 5 s), or RedisUnreachableError (or EvictingRedisError); for the CLI's one-shot commands. */
export async function connectRedis(url: string, options: RedisOptions = {}): Promise<RedisClient> {
  const opened = openRedis(url, options);
  const waitMs = options.connectWaitMs ?? 5000;
  if (!(await settlesWithin(opened.ready, waitMs))) {
    await opened.redis.close().catch(() => {});
    throw new RedisUnreachableError(opened.address, waitMs, opened.lastError());
  }
  return opened.redis;
}

async function maxmemoryPolicies(redis: RedisClient): Promise<string[]> {
  // RESP2 answers [name, value], RESP3 a map; node-redis hands the map over as an object or a Map.
  const replies = await redis.onEveryNode<unknown>(["CONFIG", "GET", "maxmemory-policy"]);
  return replies.map((reply) => toRecord(reply)["maxmemory-policy"] ?? "noeviction");
}

export async function maxmemoryPolicy(redis: RedisClient): Promise<string> {
  return (await maxmemoryPolicies(redis))[0] ?? "noeviction";
}

/** INFO stats' evicted_keys: keys Redis dropped under memory pressure since it started, summed over the nodes. */
export async function evictedKeys(redis: RedisClient): Promise<number> {
  const infos = await redis.onEveryNode<string>(["INFO", "stats"]);
  return infos.reduce((sum, info) => sum + Number(/evicted_keys:(\d+)/.exec(info)?.[1] ?? 0), 0);
}

/**
 * A deadline on every command, and a breaker behind it. node-redis's command timeout only
 * covers the wait to be written: once a command is on the socket its timer is removed
 * (commands-queue.js drops the listener at write), so a Redis that stops answering without
 * closing the connection (SIGSTOP, a partition without a reset, a long fork) would hold every
 * count read and every rate-limited request until TCP gives up. So each command races our own
 * timer; after a miss, commands are refused at once (RedisUnavailableError: reads fall back to
 * PostgreSQL, the rate limit skips, the feeder retries later), isReady is false, and one probe
 * at a time is let through, 50 ms to 1 s apart, until one is answered. A command that timed out
 * here may still run later: increments are idempotent per event and an install with an older
 * boundary is refused, so that does no harm.
 */
interface Gate {
  /** false until connected and its eviction policy accepted: every command is refused at once. */
  admitted(): boolean;
  /** The breaker opened or closed (with the timeout when it opened). */
  onChange(err?: unknown): void;
  close(): void;
}

function withDeadline(inner: RedisClient, timeoutMs: number, gate: Gate): RedisClient {
  const guard = { answering: true, probing: false, retryAt: 0, backoffMs: 50 };
  const bounded = <T>(command: () => Promise<T>): Promise<T> => {
    if (!gate.admitted())
      return Promise.reject(new RedisUnavailableError("Redis is not connected yet (connecting in the background)"));
    let probe = false;
    if (!guard.answering) {
      if (guard.probing || Date.now() < guard.retryAt) return Promise.reject(new RedisUnavailableError());
      guard.probing = probe = true;
    }
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      // Rejected from the check phase, after this loop iteration's I/O: when the event loop was
      // blocked past the deadline (GC, a busy machine), a reply already on the socket wins.
      timer = setTimeout(() => setImmediate(() => reject(new RedisTimeoutError(timeoutMs))), timeoutMs);
    });
    return Promise.race([command(), deadline]).then(
      (reply) => {
        clearTimeout(timer);
        if (probe || !guard.answering) {
          Object.assign(guard, { answering: true, probing: false, backoffMs: 50 });
          gate.onChange();
        }
        return reply;
      },
      (err: unknown) => {
        clearTimeout(timer);
        if (probe) guard.probing = false;
        if (err instanceof RedisTimeoutError) {
          const opened = guard.answering;
          guard.answering = false;
          guard.retryAt = Date.now() + guard.backoffMs;
          guard.backoffMs = Math.min(guard.backoffMs * 2, 1000);
          if (opened) gate.onChange(err);
        }
        throw err;
      },
    );
  };
  return {
    topology: inner.topology,
    get isReady() {
      return gate.admitted() && inner.isReady && guard.answering;
    },
    sendCommand: <T>(args: readonly string[]) => bounded(() => inner.sendCommand<T>(args)),
    hGetAll: (key) => bounded(() => inner.hGetAll(key)),
    hSet: (key, fields) => bounded(() => inner.hSet(key, fields)),
    onEveryNode: <T>(args: readonly string[]) => bounded(() => inner.onEveryNode<T>(args)),
    nodes: () => inner.nodes(),
    flushAll: () => bounded(() => inner.flushAll()),
    close: () => {
      gate.close();
      return inner.close();
    },
  };
}
