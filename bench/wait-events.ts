/**
 * What the benchmark's backends are doing while a phase runs: pg_stat_activity sampled every
 * few milliseconds from a connection of its own, one count per backend and sample, by wait event
 * ("CPU" for an active backend with none, "client" for one idle or idle in transaction, i.e.
 * waiting for the next statement from node).
 */
import type { Pool } from "../src/db/pool.ts";

export interface WaitSampler {
  stop(): Promise<Map<string, number>>;
}

const SAMPLE_SQL = `
  SELECT CASE WHEN state IN ('idle', 'idle in transaction') THEN 'client'
              WHEN wait_event IS NULL THEN 'CPU'
              ELSE wait_event_type || ':' || wait_event END AS what,
         count(*)::int AS n
    FROM pg_stat_activity
   WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()
   GROUP BY 1`;

export function sampleWaits(pool: Pool, database: string, applicationName: string, everyMs = 5): WaitSampler {
  const counts = new Map<string, number>();
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await pool.query<{ what: string; n: number }>({
        name: "bench_wait_sample",
        text: SAMPLE_SQL,
        values: [database, applicationName],
      });
      for (const { what, n } of rows) counts.set(what, (counts.get(what) ?? 0) + n);
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return counts;
    },
  };
}

/** "Lock:transactionid 41%, CPU 30%, client 20%": shares of the backend samples that were not idle at the client, top `top`. */
export function formatWaits(counts: Map<string, number>, top = 3): string {
  const busy = [...counts].filter(([what]) => what !== "client");
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  if (total === 0) return "";
  const shares = busy
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([what, n]) => `${what} ${Math.round((100 * n) / total)}%`);
  return `backends: ${[...shares, `client ${Math.round((100 * (counts.get("client") ?? 0)) / total)}%`].join(", ")}`;
}
