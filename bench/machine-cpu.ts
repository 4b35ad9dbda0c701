/**
 * The whole machine's CPU time (Linux /proc/stat, every core; undefined elsewhere): what one
 * operation costs everything on the machine (node, PostgreSQL's backends, pgbench), and whether the
 * cores were saturated, so a rate can be read against the CPU it had.
 */
import { readFileSync } from "node:fs";

const TICK_MS = 10; // USER_HZ is 100 on Linux

export interface MachineCpu {
  /** Milliseconds the cores spent busy (user, nice, system, irq, softirq, steal), summed over cores. */
  busyMs: number;
  /** Milliseconds of all cores, busy or idle. */
  totalMs: number;
}

export function machineCpu(): MachineCpu | undefined {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1, 9).map(Number);
    const busy = user! + nice! + system! + irq! + softirq! + (steal ?? 0);
    return { busyMs: busy * TICK_MS, totalMs: (busy + idle! + iowait!) * TICK_MS };
  } catch {
    return undefined;
  }
}

/** The machine's busy time and total time between two samples. */
export function machineCpuSince(before: MachineCpu | undefined): MachineCpu | undefined {
  const after = machineCpu();
  return before && after
    ? { busyMs: after.busyMs - before.busyMs, totalMs: after.totalMs - before.totalMs }
    : undefined;
}
