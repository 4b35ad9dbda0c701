import { readFileSync } from "node:fs";

/**
 * What the kernel says about a process. `kill(pid, 0)` cannot tell a running process from a
 * zombie (a dead process its parent has not reaped yet): right after a kill -9 of a process
 * group the old server and its postmaster are zombies until PID 1 reaps them, and a check by
 * signal alone took them for live owners of the data directory.
 */
export type ProcessState = "running" | "zombie" | "gone";

export function processState(pid: number): ProcessState {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "gone";
    return signalProbe(pid);
  }
  // "pid (comm) S ...": comm may itself hold spaces and parentheses, so the state is the first
  // field after the last ')'.
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  return state === "Z" || state === "X" || state === "x" ? "zombie" : "running";
}

/** Where /proc is unreadable (not Linux): the best a signal can say. */
function signalProbe(pid: number): ProcessState {
  try {
    process.kill(pid, 0);
    return "running";
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM" ? "running" : "gone";
  }
}

/** Running, not a zombie, and (when /proc tells) the named program, so a recycled pid is not taken for ours. */
export function isRunning(pid: number | undefined, command?: string): boolean {
  if (pid === undefined || processState(pid) !== "running") return false;
  if (command === undefined) return true;
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === command;
  } catch {
    return true;
  }
}
