import { signToken } from "../../api/auth.ts";
import { loadConfig } from "../../config.ts";
import { InvalidInputError } from "../../errors.ts";
import { loadJwtSecret } from "../../runtime/secret.ts";

/** `social-ledger token <userId>`: the token on stdout and nothing else, so `$(social-ledger token alice)` works. */
export async function token(userId: string, opts: { admin?: boolean; ttl: number }): Promise<number> {
  const config = loadConfig();
  // The service would refuse an HS256 token: tokens come from the identity provider.
  if (config.jwks) throw new InvalidInputError("LEDGER_JWKS_URL", `is set: tokens come from the identity provider (${config.jwks.issuer}), and this service refuses the HS256 tokens token mints; get one from the provider`);
  // serve would refuse it: say so now rather than hand out a token that never works.
  if (opts.ttl > config.jwtMaxTtlSeconds) throw new InvalidInputError("--ttl", `must be at most LEDGER_JWT_MAX_TTL_SECONDS (${config.jwtMaxTtlSeconds})`);
  const secret = await loadJwtSecret(config);
  process.stdout.write(`${await signToken(secret, userId, { admin: opts.admin === true, ttlSeconds: opts.ttl })}\n`);
  return 0;
}
