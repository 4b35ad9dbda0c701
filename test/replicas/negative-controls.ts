/**
 * Deliberately wrong read routing, kept only so tests can show what the real routing prevents.
 * Never used by the service.
 */
import type { Pool } from "../../src/db/pool.ts";
import { PostService } from "../../src/content/posts.ts";
import type { ReadDecision, ReadMode } from "../../src/content/post-types.ts";

/**
 * Statement-level balancing (what a proxy such as pgpool does with reads): a statement that
 * reads the post table goes to the primary, where new content is, and every other statement,
 * among them the follow, block and projection reads that decide permission, to a replica.
 */
function splitByStatement(primary: Pool, replica: Pool): Pool {
  const split = {
    query: (text: string | { text: string }, values?: unknown[]) => {
      const sql = typeof text === "string" ? text : text.text;
      return (/\bFROM post\b/.test(sql) ? primary : replica).query(sql, values);
    },
  };
  return split as unknown as Pool;
}

/**
 * Negative control for the new-enemy guarantee on replicas: canRead with its permission reads
 * on `replica`. When the replica has not replayed a block, a post the author created after the
 * block (found on the primary) is allowed to the blocked reader in every read mode. The service
 * runs canRead on the primary only (docs/read-replicas.md).
 */
export async function canReadWithPermissionsOnReplica(
  primary: Pool,
  replica: Pool,
  reader: string,
  postId: string,
  mode: ReadMode,
): Promise<ReadDecision> {
  const posts = await PostService.open(splitByStatement(primary, replica));
  return posts.canRead(reader, postId, mode);
}
