/**
 * CPU time of one thread (Linux /proc; undefined elsewhere): the server's and the HTTP client's
 * share of a phase, which a shared machine's load changes far less than it changes throughput.
 */
import { readFileSync } from "node:fs";

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** user + system CPU milliseconds of the calling thread so far, or undefined without /proc. */
export function threadCpuMs(): number | undefined {
  try {
    const stat = readFileSync("/proc/thread-self/stat", "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return undefined;
  }
}
