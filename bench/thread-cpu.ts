/**
 * CPU time of one thread (Linux /proc; undefined elsewhere): the server's and the HTTP client's
 * share of a phase, which a shared machine's load changes far less than it changes throughput.
 */
import { readFileSync } from "node:fs";

const TICK_MS = 10; // USER_HZ is 100 on Linux

/**
 * CPU milliseconds of the calling thread so far, or undefined without /proc: the scheduler's
 * own runtime in nanoseconds (schedstat) where the kernel keeps it, else user + system time in
 * 10 ms ticks (stat). A chunk of 600 requests at ~250 µs is 150 ms of CPU, which ticks measure
 * to within ±7 %; schedstat to well under 1 %.
 */
export function threadCpuMs(): number | undefined {
  try {
    const runtimeNs = Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]);
    if (Number.isFinite(runtimeNs) && runtimeNs > 0) return runtimeNs / 1e6;
  } catch {
    // no schedstat (CONFIG_SCHEDSTATS off): the ticks below
  }
  try {
    const stat = readFileSync("/proc/thread-self/stat", "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return undefined;
  }
}
