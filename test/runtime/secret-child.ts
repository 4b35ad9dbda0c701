/**
 * A process that creates (or reads) the secret `s` in `<base>/0` .. `<base>/<count - 1>` once
 * it reads a line on stdin, and prints each value it read as one JSON line: the child of
 * secret-file.test.ts, several of which race through the same fresh directories.
 */
import path from "node:path";
import { once } from "node:events";
import { readOrCreateSecret } from "../../src/runtime/secret.ts";

const [base, count] = [process.argv[2]!, Number(process.argv[3])];
process.stdout.write("ready\n");
await once(process.stdin, "data");
for (let i = 0; i < count; i++) {
  const value = await readOrCreateSecret(path.join(base, String(i)), "s").catch(
    (err: Error) => `error: ${err.message}`,
  );
  process.stdout.write(JSON.stringify({ dir: i, value }) + "\n");
}
process.exit(0);
