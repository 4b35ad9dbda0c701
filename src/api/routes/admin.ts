import type { FastifyInstance, FastifyRequest } from "fastify";
import { requireAdmin } from "../auth.ts";
import { readWatermarks } from "../metrics.ts";
import { bearer, errors, id } from "../schemas.ts";
import { readSide, readSideClean, writeSide, writeSideClean } from "../../likes/like-audit.ts";
import { auditRelations, projectionDiff, relationAuditClean } from "../../relations/relation-audit.ts";
import { transactionStats } from "../../db/transaction.ts";
import { recordRebuildDrift } from "../../cache/reconciler.ts";
import type { Ledger } from "../../ledger.ts";

/** Every invariant check of both capabilities, as `social-ledger audit` and GET /v1/admin/audit report them. */
export async function fullAudit(ledger: Ledger) {
  const likesWrite = await writeSide(ledger.pool);
  const likesRead = await readSide(ledger.pool);
  const relations = await auditRelations(ledger.pool);
  const watermarks = await readWatermarks(ledger.pool);
  const projectionCaughtUp = watermarks.filter((w) => w.view === "follower_projection").every((w) => w.appliedUpto === w.last);
  // The diff against the truth only means something once the projection has caught up.
  const diff = projectionCaughtUp ? await projectionDiff(ledger.pool) : null;
  const clean = writeSideClean(likesWrite) && readSideClean(likesRead) && relationAuditClean(relations) &&
    (diff === null || Object.values(diff).every((n) => n === 0));
  return { clean, likes: { writeSide: likesWrite, readSide: likesRead }, relations: { invariants: relations, projectionCaughtUp, projectionDiff: diff } };
}

// 200 responses, so that the OpenAPI document lists them (they also serialize the replies:
// keep them complete, or mark objects additionalProperties: true).
const integer = { type: "integer" } as const;
const statusResponse = {
  type: "object", required: ["partitions", "views", "transactionRetries"],
  properties: {
    partitions: integer,
    views: {
      type: "array",
      items: {
        type: "object", required: ["view", "part", "last", "appliedUpto", "lag"],
        properties: { view: { type: "string", enum: ["like_count", "follower_projection"] }, part: integer, last: integer, appliedUpto: integer, lag: integer },
      },
    },
    transactionRetries: integer,
  },
} as const;
const auditResponse = {
  type: "object", required: ["clean", "likes", "relations"],
  properties: {
    clean: { type: "boolean" },
    likes: { type: "object", description: "writeSide and readSide checks of the likes ledger", additionalProperties: true },
    relations: { type: "object", description: "invariants, projectionCaughtUp and projectionDiff of the follow graph", additionalProperties: true },
  },
} as const;
const rebuildResponse = {
  type: "object", required: ["runId", "snapshotSeqs", "itemsChecked", "drifted", "totalAbsDrift"],
  properties: {
    runId: integer,
    snapshotSeqs: { type: "array", items: integer },
    itemsChecked: integer,
    drifted: {
      type: "array",
      items: {
        type: "object", required: ["itemId", "oldN", "newN", "drift", "skippedPartitions"],
        properties: { itemId: { type: "string" }, oldN: integer, newN: integer, drift: integer, skippedPartitions: { type: "array", items: integer } },
      },
    },
    totalAbsDrift: integer,
  },
} as const;

export async function adminRoutes(app: FastifyInstance): Promise<void> {
  const { ledger } = app;

  app.get("/v1/admin/status", {
    schema: { tags: ["admin"], summary: "Sequences, watermarks and lag per view and partition", security: bearer, response: { 200: statusResponse, ...errors(401, 403) } },
  }, async (request) => {
    requireAdmin(request);
    const views = (await readWatermarks(ledger.pool)).map((w) => ({ ...w, lag: w.last - w.appliedUpto }));
    return { partitions: ledger.partitions, views, transactionRetries: transactionStats.retries };
  });

  app.get("/v1/admin/audit", {
    schema: { tags: ["admin"], summary: "Write-side and read-side invariant checks; clean=false on any violation", security: bearer, response: { 200: auditResponse, ...errors(401, 403) } },
  }, async (request) => {
    requireAdmin(request);
    return fullAudit(ledger);
  });

  app.post("/v1/admin/rebuild", {
    schema: {
      tags: ["admin"], summary: "Rebuild like counts from a snapshot baseline; reports the drift it corrected", security: bearer,
      body: { type: ["object", "null"], additionalProperties: false, properties: { items: { type: "array", items: id, maxItems: 10000 } } },
      response: { 200: rebuildResponse, ...errors(400, 401, 403, 404) },
    },
  }, async (request: FastifyRequest<{ Body: { items?: string[] } | null }>) => {
    requireAdmin(request);
    const items = request.body?.items;
    const report = await ledger.likeRebuild.rebuild(items ? { items } : {});
    await recordRebuildDrift(ledger.pool, report.drifted, app.counts.metrics);
    return report;
  });
}
