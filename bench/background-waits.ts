/**
 * What live backends wait on while a background job runs: pg_stat_activity and pg_locks sampled
 * every few milliseconds from a connection of its own. Each sample of a live backend that is
 * running a statement is classed by its wait event ("CPU" for none), and a lock wait also by the
 * table of the row it waits for (the tuple lock a row-lock waiter holds) and by whether the
 * background backend is among its blockers. The background backend is the one whose statement
 * matches `backgroundQuery` (a LIKE pattern).
 */
import type { Pool } from "../src/db/pool.ts";

export interface BackgroundWaits {
  /** Samples of live backends running a statement, by "what" (wait event, table, blocker). */
  live: Map<string, number>;
  /** Samples of the background backend, by wait event. */
  background: Map<string, number>;
  samples: number;
}

const SAMPLE_SQL = `
  SELECT a.query LIKE $2 AS background,
         CASE WHEN a.wait_event IS NULL THEN 'CPU' ELSE a.wait_event_type || ':' || a.wait_event END
         || CASE WHEN a.wait_event_type = 'Lock' THEN
              coalesce(' on ' || (SELECT string_agg(DISTINCT l.relation::regclass::text, ',') FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'tuple'), '')
              || CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(a.pid)) AND b.query LIKE $2)
                      THEN ' (blocked by the job)' ELSE ' (blocked by a live write)' END
            ELSE '' END AS what,
         count(*)::int AS n
    FROM pg_stat_activity a
   WHERE a.datname = $1 AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend' AND a.state = 'active'
   GROUP BY 1, 2`;

export function sampleBackgroundWaits(
  pool: Pool,
  database: string,
  backgroundQuery: string,
  everyMs = 5,
): { stop(): Promise<BackgroundWaits> } {
  const result: BackgroundWaits = { live: new Map(), background: new Map(), samples: 0 };
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await pool.query<{ background: boolean; what: string; n: number }>({
        name: "bench_background_waits",
        text: SAMPLE_SQL,
        values: [database, backgroundQuery],
      });
      result.samples++;
      for (const { background, what, n } of rows) {
        const into = background ? result.background : result.live;
        into.set(what, (into.get(what) ?? 0) + n);
      }
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return result;
    },
  };
}

/** "CPU 52%, Lock:transactionid on like_seq (blocked by the job) 30%, ...": shares of the samples, top `top`. */
export function formatShares(counts: Map<string, number>, top = 4): string {
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  if (total === 0) return "(no samples)";
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([what, n]) => `${what} ${Math.round((100 * n) / total)}%`)
    .join(", ");
}
