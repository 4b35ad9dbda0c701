// A worker thread's entry point that can load TypeScript: Node 20 does not pass the parent's
// `--import tsx` hooks on to worker threads, so this registers tsx in the thread, then imports
// the module named in workerData.entry.
import { register } from "tsx/esm/api";
import { workerData } from "node:worker_threads";

register();
await import(workerData.entry);
