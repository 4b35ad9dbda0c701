import { signToken } from "../../api/auth.ts";
import { loadConfig } from "../../config.ts";
import { loadJwtSecret } from "../../runtime/secret.ts";

/** `social-ledger token <userId>`: the token on stdout and nothing else, so `$(social-ledger token alice)` works. */
export async function token(userId: string, opts: { admin?: boolean; ttl: number }): Promise<number> {
  const config = loadConfig();
  const secret = await loadJwtSecret(config);
  process.stdout.write(`${await signToken(secret, userId, { admin: opts.admin === true, ttlSeconds: opts.ttl })}\n`);
  return 0;
}
