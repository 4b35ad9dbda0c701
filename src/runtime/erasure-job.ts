import type { FastifyBaseLogger } from "fastify";
import type { ErasureService } from "../erasure/erasure-service.ts";
import { PartitionWorker } from "../workers/partition-worker.ts";
import { rest } from "../workers/pacer.ts";

/**
 * The service's background erasures (docs/erasure.md): one paced batch of the oldest running
 * erasure per pass, then the rest the pacing asks for (live traffic gets the locks and the CPU
 * between two batches), one second apart when there is none. The state is account_erasure's, so an erasure
 * started before a restart, or by another process, is continued here; two processes on one
 * erasure take turns on its row lock.
 */
export function erasureJob(erasure: ErasureService, log: FastifyBaseLogger): PartitionWorker {
  return new PartitionWorker(
    "account-eraser",
    async () => {
      const [accountId] = await erasure.running();
      if (accountId === undefined) return 0;
      const batch = await erasure.step(accountId);
      if (batch.nextPhase === "done") log.info({ erasure: { accountId } }, "account erased");
      else await rest(erasure.restAfter(batch));
      // A batch that found nothing still moved the erasure on (to its next phase): keep going.
      return batch.facts + 1;
    },
    {
      idleMs: 1_000,
      onFailing: (err) => log.warn({ reason: (err as Error).message }, "account erasure failed; retrying with backoff"),
      onRecovered: () => log.info("account erasure resumed"),
    },
  );
}
