/**
 * A webhook delivery loop as a child process of its own, over DATABASE_URL, that a test kills
 * with -9: `real` runs the delivery worker, `advance-before-send` the negative control's mutant
 * (test/webhooks/negative-controls.ts). Prints "ready" once its loop runs.
 */
import { createPool } from "../../src/db/pool.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { AdvanceBeforeSendDelivery } from "./negative-controls.ts";
import { PartitionWorker } from "../../src/workers/partition-worker.ts";
import { FAST_RETRIES } from "./fixture.ts";

const mode = process.argv[2];
const pool = createPool({
  connectionString: process.env.DATABASE_URL!,
  max: 3,
  applicationName: `webhook-child-${mode}`,
});
const delivery =
  mode === "advance-before-send"
    ? new AdvanceBeforeSendDelivery(pool, FAST_RETRIES)
    : new WebhookDelivery(pool, FAST_RETRIES);
new PartitionWorker(`webhook-child-${mode}`, () => delivery.pass(), { idleMs: 20 }).start();
process.stdout.write("ready\n");
