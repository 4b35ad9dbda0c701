/**
 * Do the consumers keep up with writers running flat out? Three rows per database, in one run:
 *  1. peak writes: like/unlike toggles at PEAK_CALLERS concurrent callers through the library, no
 *     consumer running: the write rate the consumers must outrun (CHANGED/s);
 *  2. drain: the backlog row 1 left, consumed by the like counter's loops as the service runs
 *     them (min(P, 4), the partitions dealt over them; at P = 1 one loop on one partition) and then
 *     by the notification view's like consumer the same way: events/s each (rows 1 and 2
 *     alternate in rounds);
 *  3. lag under peak load: the same writers with the service's consumer loops running
 *     (createWorkers, as serve runs them), the like counter's and the like notifications' lag
 *     sampled every LAG_SAMPLE_MS. The stated bound: every sample at most the events written in
 *     LAG_BOUND_SECONDS at the row's own rate, and both views caught up within that time once the
 *     writers stop. A lag that grows without limit breaks it within seconds.
 */
import { createWorkers } from "../src/ledger.ts";
import { CONSUMER_BATCH } from "../src/counters/partition-batch.ts";
import { abort, checkAbort } from "./lifecycle.ts";
import { mergeFigures, runForSeconds, type Figures } from "./load.ts";
import { ITEMS, item, toggle, type Opts } from "./options.ts";
import { OP } from "./ratios.ts";
import { problems, type Row } from "./report.ts";
import { eventsWritten, type Target } from "./target.ts";

/** The offered concurrency of the peak rows: where P = 1's like rate peaks on 2 cores (128-256 callers). */
export const PEAK_CALLERS = 256;
export const LAG_SAMPLE_MS = 100;
/** The lag bound, in seconds of writes at the measured rate. */
export const LAG_BOUND_SECONDS = 1;
/** Distinct users of the peak rows: more than PEAK_CALLERS pairs in flight never meet. */
const PEAK_USERS = 4000;

const NOTIFICATION_LIKE_LAG = `
  SELECT coalesce(sum(s.last - w.applied_upto), 0)::bigint AS lag
    FROM like_seq s JOIN notification_like_watermark w USING (part)`;
const COUNTER_LAG = `
  SELECT coalesce(sum(s.last - w.applied_upto), 0)::bigint AS lag
    FROM like_seq s JOIN counter_watermark w USING (part)`;

async function lagOf(t: Target, sql: string): Promise<number> {
  const { rows } = await t.pool.query<{ lag: number }>(sql);
  return Number(rows[0]!.lag);
}

function peakWrites(t: Target, prefix: string, seconds: number, first: number) {
  const ops = 2 * PEAK_USERS;
  return runForSeconds(
    seconds,
    PEAK_CALLERS,
    (k) => {
      const { j, like } = toggle(k, ops, PEAK_USERS);
      const user = `${prefix}${j}`;
      const itemId = item(j % ITEMS);
      return like ? t.ledger.likes.like(user, itemId) : t.ledger.likes.unlike(user, itemId);
    },
    abort.signal,
    first,
  );
}

/** Rounds of the alternating rows 1 and 2, and seconds of writes per round. */
const ROUNDS = 4;
function roundSeconds(o: Opts): number {
  return Math.max(1, o.chunkSeconds);
}

interface Drained {
  events: number;
  seconds: number;
  stats: Record<string, number>;
}

type Pass = (parts: readonly number[], batchSize: number) => Promise<object>;

/**
 * The backlog drained as the service's loops drain it (createWorkers: the partitions dealt over
 * min(P, 4) loops running side by side, each passing over its partitions until a pass finds
 * nothing), timed, its tallies added to `into`.
 */
async function timedDrain(t: Target, pass: Pass, into: Drained): Promise<void> {
  const parts = Array.from({ length: t.partitions }, (_, p) => p);
  const loops = Math.min(parts.length, 4);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: loops }, async (_, g) => {
      const group = parts.filter((_, i) => i % loops === g);
      for (;;) {
        const stats = Object.entries(await pass(group, CONSUMER_BATCH)) as [string, number][];
        const events = stats.reduce((a, [, v]) => a + v, 0);
        for (const [k, v] of stats) into.stats[k] = (into.stats[k] ?? 0) + v;
        into.events += events;
        if (events === 0) return;
      }
    }),
  );
  into.seconds += (performance.now() - t0) / 1000;
}

/**
 * Rows 1 and 2 in ROUNDS alternating rounds (so both sides of the ratio meet the same minutes of a
 * shared machine): writes at peak concurrency with no consumer running, then the like counter's
 * drain of the backlog they left, then the like notifications' drain of it.
 */
export async function peakWriteAndDrainPhase(t: Target, o: Opts): Promise<Row[]> {
  // Whatever earlier phases left is drained first, so the drains below measure these backlogs only.
  await t.ledger.likeConsumer.drain();
  await t.ledger.notifications.consumer("likes").drain();
  const runs: Figures[] = [];
  let changed = 0;
  const counter: Drained = { events: 0, seconds: 0, stats: {} };
  const notifications: Drained = { events: 0, seconds: 0, stats: {} };
  for (let round = 0, next = 0; round < ROUNDS; round++) {
    const events0 = await eventsWritten(t.pool);
    const figures = await peakWrites(t, "pk", roundSeconds(o), next);
    next += figures.ops;
    runs.push(figures);
    changed += (await eventsWritten(t.pool)) - events0;
    await timedDrain(t, (parts, size) => t.ledger.likeConsumer.pollOnce(parts, size), counter);
    const likeNotifications = t.ledger.notifications.consumer("likes");
    await timedDrain(t, (parts, size) => likeNotifications.pollOnce(parts, size), notifications);
    checkAbort();
  }
  const figures = mergeFigures(runs);
  const write: Row = {
    op: OP.peakWrite,
    path: "library",
    partitions: t.partitions,
    figures,
    note: [
      `${PEAK_CALLERS} callers, no consumer running, CHANGED ${changed}, ${ROUNDS} rounds alternating with the drains`,
      ...problems(figures),
    ].join(", "),
    extra: { changed, callers: PEAK_CALLERS },
  };
  const drained = (op: string, d: Drained): Row => ({
    op,
    path: "library",
    partitions: t.partitions,
    figures: {
      ops: d.events,
      seconds: d.seconds,
      opsPerSec: d.events / d.seconds,
      p50Ms: Number.NaN,
      p99Ms: Number.NaN,
      errors: 0,
    },
    note: `${Math.min(t.partitions, 4)} loop(s) as the service runs them, batches of ${CONSUMER_BATCH}: ${JSON.stringify(d.stats)}`,
    extra: { ...d.stats },
  });
  return [write, drained(OP.peakDrain, counter), drained(OP.peakDrainNotifications, notifications)];
}

/** Row 3: the peak writers with the service's consumer loops running, the lag sampled throughout. */
export async function lagUnderPeakPhase(t: Target, o: Opts): Promise<Row> {
  await t.ledger.likeConsumer.drain();
  await t.ledger.notifications.drain();
  let applied = 0;
  const workers = createWorkers(t.ledger, { idleMs: 20, onLikes: (s) => (applied += s.applied + s.covered + s.dup) });
  for (const w of workers) w.start();
  const counterLag: number[] = [];
  const notificationLag: number[] = [];
  let writing = true;
  const sampler = (async () => {
    while (writing) {
      counterLag.push(await lagOf(t, COUNTER_LAG));
      notificationLag.push(await lagOf(t, NOTIFICATION_LIKE_LAG));
      await new Promise((resolve) => setTimeout(resolve, LAG_SAMPLE_MS));
    }
  })();
  const events0 = await eventsWritten(t.pool);
  const figures = await peakWrites(t, "pl", ROUNDS * roundSeconds(o), 0);
  const changed = (await eventsWritten(t.pool)) - events0;
  writing = false;
  await sampler;
  const t0 = performance.now();
  while (
    ((await lagOf(t, COUNTER_LAG)) > 0 || (await lagOf(t, NOTIFICATION_LIKE_LAG)) > 0) &&
    !abort.signal.aborted &&
    performance.now() - t0 < 60_000
  ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const catchUpMs = performance.now() - t0;
  for (const w of workers) await w.stop();
  const rate = changed / figures.seconds;
  const bound = Math.ceil(rate * LAG_BOUND_SECONDS);
  const maxCounterLag = Math.max(0, ...counterLag);
  const maxNotificationLag = Math.max(0, ...notificationLag);
  const within = maxCounterLag <= bound && maxNotificationLag <= bound && catchUpMs <= 1000 * LAG_BOUND_SECONDS;
  return {
    op: OP.lagUnderPeak,
    path: "library",
    partitions: t.partitions,
    figures,
    note: [
      `${PEAK_CALLERS} callers, CHANGED ${changed}; lag max ${maxCounterLag} (counter), ${maxNotificationLag} (notifications) ` +
        `over ${counterLag.length} samples, bound ${bound} (${LAG_BOUND_SECONDS} s of writes): ${within ? "within" : "EXCEEDED"}; ` +
        `caught up ${Math.round(catchUpMs)} ms after the writers stopped`,
      ...problems(figures),
    ].join(", "),
    extra: {
      changed,
      callers: PEAK_CALLERS,
      counterLag,
      notificationLag,
      maxCounterLag,
      maxNotificationLag,
      lagBound: bound,
      lagWithinBound: within,
      catchUpMs,
      counterApplied: applied,
    },
  };
}
