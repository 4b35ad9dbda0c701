import type { Ledger } from "../ledger.ts";
import type { LedgerMetrics } from "./metrics.ts";

declare module "fastify" {
  interface FastifyInstance {
    ledger: Ledger;
    metrics: LedgerMetrics;
  }
}
