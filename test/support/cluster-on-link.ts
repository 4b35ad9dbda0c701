/**
 * An embedded PostgreSQL that a network namespace reaches over one of its veth pairs: listening on
 * 127.0.0.1 (for the test's own checks, which no cut touches) and on the link's host end, with a
 * pg_hba.conf line for the namespace's end.
 */
import { appendFile } from "node:fs/promises";
import { EmbeddedCluster } from "../../src/db/embedded-cluster.ts";
import { createPool } from "../../src/db/pool.ts";
import type { Link } from "./netns.ts";

export interface ClusterOnLink {
  cluster: EmbeddedCluster;
  /** The superuser's URL as the namespace reaches it (over the link). */
  url: string;
}

export async function startClusterOnLink(dataDir: string, link: Link): Promise<ClusterOnLink> {
  const cluster = await EmbeddedCluster.start({
    dataDir,
    settings: { listen_addresses: `127.0.0.1,${link.here.address}` },
  });
  try {
    await appendFile(`${cluster.dataDir}/pg_hba.conf`, `host all all ${link.there.address}/32 scram-sha-256\n`);
    const admin = createPool({ connectionString: cluster.connectionString(), max: 1 });
    try {
      await admin.query("SELECT pg_reload_conf()");
    } finally {
      await admin.end();
    }
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return { cluster, url: `postgres://postgres:postgres@${link.here.address}:${cluster.port}/postgres` };
}
