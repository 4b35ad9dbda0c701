/**
 * Deliberately wrong variants from chapter 30, kept only so tests can show what they break.
 * Not exported from src/relations/index.ts; never use them.
 */
import type { ProjectStep } from "../../src/relations/projector.ts";

/** 30-G's applyNaive: overwrite in arrival order, no version comparison, no dedup. */
export const projectNaive: ProjectStep = async (client, e) => {
  await client.query("INSERT INTO proj_seen (part, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING", [e.part, e.seq]);
  const { rows } = await client.query<{ state: string }>(
    `SELECT state FROM proj_follower WHERE followee = $1 AND follower = $2 FOR UPDATE`,
    [e.followee, e.follower],
  );
  const oldActive = rows[0]?.state === "ACTIVE";
  await client.query(
    `INSERT INTO proj_follower (followee, follower, state, version, since) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (followee, follower) DO UPDATE SET state = EXCLUDED.state, version = EXCLUDED.version, since = EXCLUDED.since`,
    [e.followee, e.follower, e.state, e.version, e.createdAt],
  );
  const delta = (e.state === "ACTIVE" ? 1 : 0) - (oldActive ? 1 : 0);
  if (delta !== 0) {
    await client.query(
      `INSERT INTO proj_count (followee, n) VALUES ($1, $2) ON CONFLICT (followee) DO UPDATE SET n = proj_count.n + EXCLUDED.n`,
      [e.followee, delta],
    );
  }
  return "applied";
};
