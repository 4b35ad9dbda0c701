/**
 * A deliberately wrong delivery, kept only so a test can show that its checks catch the bug
 * (test/webhooks/kill-delivery.test.ts). Never use it.
 */
import { withTransaction } from "../../src/db/transaction.ts";
import { CLAIM_SQL, WebhookDelivery, type Claim } from "../../src/webhooks/delivery-worker.ts";
import { deliverable, readEvents } from "../../src/webhooks/webhook-events.ts";

/** Moves the cursor past the event and commits before sending it: a crash in between loses the event. */
export class AdvanceBeforeSendDelivery extends WebhookDelivery {
  override async step(): Promise<number> {
    const claimed = await withTransaction(
      this.pool,
      async (client) => {
        const claim = (await client.query<Claim>(CLAIM_SQL)).rows[0];
        if (!claim) return undefined;
        const events = await readEvents(client, claim.source, claim.part, claim.delivered_upto, this.pageSize);
        const event = events.find((e) => deliverable(claim.events, e));
        await this.advance(client, claim, (event ?? events.at(-1)!).seq);
        return event && { claim, event };
      },
      { maxAttempts: 1 },
    );
    if (!claimed) return 0;
    await this.send(claimed.claim, claimed.event);
    return 1;
  }
}
