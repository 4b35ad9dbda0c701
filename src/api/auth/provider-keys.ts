import {
  createLocalJWKSet,
  createRemoteJWKSet,
  errors as joseErrors,
  jwksCache,
  type FlattenedJWSInput,
  type JSONWebKeySet,
  type JWK,
  type JWSHeaderParameters,
  type ExportedJWKSCache,
  type JWKSCacheInput,
  type RemoteJWKSet,
} from "jose";

export interface ProviderKeyOptions {
  /** The provider's JWKS (LEDGER_JWKS_URL). */
  url: string;
  /** A kid the set lacks refetches it at most this often after a fetch; so does a failed fetch. */
  cooldownMs: number;
  /** A set older than this is fetched again before use. */
  cacheMaxAgeMs: number;
  /** A fetch not answered within this fails (jose's default, 5 s). */
  timeoutMs?: number;
  /** Told of each failed fetch (the service logs it). */
  onFetchFailed?: (reason: string) => void;
  /** Told of each fetched set that differs from the one before, with its kids. */
  onKeysChanged?: (kids: string[]) => void;
}

/** No set of the provider's keys could be fetched yet, or a fetch failed and the last set lacks the token's key. */
export class KeysUnavailableError extends Error {
  constructor(readonly reason: string) {
    super(`the identity provider's keys could not be fetched: ${reason}`);
  }
}

/** The errors by which a fetched set answers "no such key" (not a failure to fetch it). */
function isAnswerOfTheSet(err: unknown): boolean {
  return (
    err instanceof joseErrors.JWKSNoMatchingKey ||
    err instanceof joseErrors.JWKSMultipleMatchingKeys ||
    err instanceof joseErrors.JOSENotSupported
  );
}

const describe = (err: unknown) =>
  err instanceof Error ? `${err.message}${err.cause instanceof Error ? ` (${err.cause.message})` : ""}` : String(err);

/**
 * The identity provider's signing keys, by jose's remote key set: fetched when first needed, kept
 * for cacheMaxAgeMs, and fetched again for a kid it lacks at most once per cooldownMs, so that a
 * rotation is picked up without a restart and a flood of made-up kids cannot hammer the provider.
 * jose retries a failed fetch on every call, and throws once its set is older than cacheMaxAge
 * and the provider does not answer; so around it: after a failed fetch the provider is asked
 * again only after cooldownMs, and meanwhile keys come from the last set that was fetched, so a
 * token signed with a known key keeps working while the provider is down.
 */
export class ProviderKeys {
  /** jose writes each fetched set and its time here (its "externally persisted" cache); we only read it. */
  private readonly fetched: Partial<ExportedJWKSCache> = {};
  private readonly remote: RemoteJWKSet;
  private failedAt: number | undefined;
  /** The set noteFetch last saw (jose stores a new object per fetch) and its keys as JSON. */
  private seen: { jwks: JSONWebKeySet; keys: string[] } | undefined;
  private lastSet: { jwks: JSONWebKeySet; keys: ReturnType<typeof createLocalJWKSet> } | undefined;
  private generation = 0;

  constructor(private readonly options: ProviderKeyOptions) {
    this.remote = createRemoteJWKSet(new URL(options.url), {
      cooldownDuration: options.cooldownMs,
      cacheMaxAge: options.cacheMaxAgeMs,
      timeoutDuration: options.timeoutMs ?? 5000,
      [jwksCache]: this.fetched as JWKSCacheInput,
    });
  }

  /** The key resolver for jwtVerify. */
  readonly resolve = async (header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<CryptoKey> => {
    if (this.failedAt === undefined || Date.now() - this.failedAt >= this.options.cooldownMs) {
      try {
        const key = await this.remote(header, token);
        this.noteFetch();
        return key;
      } catch (err) {
        this.noteFetch();
        if (isAnswerOfTheSet(err)) throw err;
        this.failed(err);
      }
    }
    return this.fromLastSet(header, token);
  };

  /** Fetches the set once at start, so that a wrong URL shows in the log before the first token; a failure is no error. */
  async warmUp(): Promise<void> {
    try {
      await this.remote.reload();
      this.noteFetch();
    } catch (err) {
      this.failed(err);
    }
  }

  /** Whether the last fetch failed (and no later one succeeded). */
  get failing(): boolean {
    return this.failedAt !== undefined;
  }

  /** Bumped when a fetched set no longer holds a key the one before held: tokens signed with it must be checked again. */
  keyGeneration(): number {
    return this.generation;
  }

  /** The key of the last fetched set with this kid, whatever its type. */
  knownKey(kid: string | undefined): JWK | undefined {
    return kid === undefined ? undefined : this.fetched.jwks?.keys.find((k) => k.kid === kid);
  }

  private failed(err: unknown): void {
    this.failedAt = Date.now();
    this.options.onFetchFailed?.(describe(err));
  }

  private async fromLastSet(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<CryptoKey> {
    const jwks = this.fetched.jwks;
    if (!jwks) throw new KeysUnavailableError("no key set was fetched yet");
    if (this.lastSet?.jwks !== jwks) this.lastSet = { jwks, keys: createLocalJWKSet(jwks) };
    try {
      return await this.lastSet.keys(header, token);
    } catch (err) {
      if (isAnswerOfTheSet(err)) throw err;
      throw new KeysUnavailableError(describe(err));
    }
  }

  /** After jose answered: a set fetched since the last look ends a failure, and a withdrawn key starts a new generation. */
  private noteFetch(): void {
    const jwks = this.fetched.jwks;
    if (!jwks || jwks === this.seen?.jwks) return;
    const keys = jwks.keys.map((k) => JSON.stringify(k));
    const before = this.seen?.keys ?? [];
    this.seen = { jwks, keys };
    this.failedAt = undefined;
    if (before.some((k) => !keys.includes(k))) this.generation += 1;
    if (before.join("\n") !== keys.join("\n")) this.options.onKeysChanged?.(jwks.keys.map((k) => k.kid ?? "(no kid)"));
  }
}
