import { existsSync } from "node:fs";
import { signToken } from "../../api/auth.ts";
import { loadConfig } from "../../config.ts";
import { InvalidInputError } from "../../errors.ts";
import { jwtSecretSource, loadJwtSecret } from "../../runtime/secret.ts";

/**
 * `social-ledger token <userId>`: the token on stdout and nothing else, so `$(social-ledger token
 * alice)` works; on stderr, which secret signed it. The service creates its secret in its data
 * directory when it first starts; a token signed with a secret this command made up elsewhere (run
 * from another directory, without the service's LEDGER_DATA_DIR) would only be refused with a 401,
 * so a missing secret file is created only with --create-secret (minting before the first start).
 */
export async function token(
  userId: string,
  opts: { admin?: boolean; ttl: number; createSecret?: boolean },
): Promise<number> {
  const config = loadConfig();
  // The service would refuse an HS256 token: tokens come from the identity provider.
  if (config.jwks)
    throw new InvalidInputError(
      "LEDGER_JWKS_URL",
      `is set: tokens come from the identity provider (${config.jwks.issuer}), and this service refuses the HS256 tokens token mints; get one from the provider`,
    );
  // serve would refuse it: say so now rather than hand out a token that never works.
  if (opts.ttl > config.jwtMaxTtlSeconds)
    throw new InvalidInputError(
      "--ttl",
      `must be at most ${config.jwtMaxTtlSeconds} s (LEDGER_JWT_MAX_TTL_MS=${config.jwtMaxTtlSeconds * 1000})`,
    );
  const source = jwtSecretSource(config);
  let created = false;
  if (source.kind === "file" && !existsSync(source.file)) {
    if (!opts.createSecret) {
      throw new InvalidInputError(
        "LEDGER_DATA_DIR",
        `no JWT secret at ${source.file}: the service creates it in its data directory when it first starts; run token with the service's LEDGER_DATA_DIR (or LEDGER_JWT_SECRET), or pass --create-secret to create one here before the first start`,
      );
    }
    created = true;
  }
  const secret = await loadJwtSecret(config);
  process.stdout.write(`${await signToken(secret, userId, { admin: opts.admin === true, ttlSeconds: opts.ttl })}\n`);
  process.stderr.write(
    source.kind === "environment"
      ? "social-ledger token: signed with LEDGER_JWT_SECRET\n"
      : `social-ledger token: signed with the secret in ${source.file}${created ? " (created now)" : ""}\n`,
  );
  return 0;
}
