import type { CountReader } from "../cache/count-reader.ts";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Ledger } from "../ledger.ts";
import type { LedgerMetrics } from "./metrics.ts";

declare module "fastify" {
  interface FastifyInstance {
    ledger: Ledger;
    metrics: LedgerMetrics;
    counts: CountReader;
  }
}

/** The one per-user write limiter, an onRequest hook every write route shares (see app.ts). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- fits the onRequest of routes of any generic
export type WriteLimit = (request: FastifyRequest<any>, reply: FastifyReply<any>) => Promise<unknown>;
