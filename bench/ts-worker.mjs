// A worker thread's entry point that can load TypeScript: Node 20 does not pass the parent's
// `--import tsx` hooks on to worker threads, so this registers tsx in the thread, then imports
// the module named in workerData.entry (which reads its own input from workerData.job).
import { register } from "tsx/esm/api";
import { workerData } from "node:worker_threads";

register();
await import(workerData.entry);
