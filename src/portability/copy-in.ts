import { pipeline } from "node:stream/promises";
import { from as copyFrom } from "pg-copy-streams";
import type { PoolClient } from "../db/pool.ts";
import { mapPgError } from "../db/errors.ts";

/**
 * `COPY ... FROM STDIN` of the chunks of `source`, through pg-copy-streams; resolves with the rows
 * copied. `pipeline` pulls the next chunk only when the COPY stream accepts more, and that stream
 * waits for the socket's `drain`, so a slow server slows the reading of the source instead of
 * filling memory. A source that throws destroys the stream, which sends CopyFail (the server aborts
 * the COPY); the source's error is the one thrown, since the server's "COPY from stdin failed" only
 * echoes it. The server's own errors (a bad row, a lost connection) come out as typed errors.
 */
export async function copyIn(client: PoolClient, text: string, source: AsyncIterable<string>): Promise<number> {
  const copy = client.query(copyFrom(text));
  let sourceFailure: { error: unknown } | undefined;
  const chunks = async function* (): AsyncGenerator<string> {
    try {
      yield* source;
    } catch (err) {
      sourceFailure = { error: err };
      throw err;
    }
  };
  try {
    await pipeline(chunks(), copy);
  } catch (err) {
    throw sourceFailure ? sourceFailure.error : mapPgError(err);
  }
  return copy.rowCount;
}
