import type { Pool } from "../db/pool.ts";
import { RelationService } from "../relations/relation-service.ts";
import { ImportApply, type Applied, type ApplyOptions } from "./import-apply.ts";
import { stageImport, type StageOptions, type StagedRun } from "./import-stage.ts";

export interface ImportReport {
  runId: number;
  lines: number;
  /** none: staged now; resumed: a run of this file had been staged (and perhaps partly applied) before; done: imported before, nothing changed. */
  existing: StagedRun["existing"];
  /** empty-ledger: items and likes were bulk-loaded in the staging transaction (docs/import.md); resumable: all in batches. */
  path: StagedRun["path"];
  applied: Applied;
}

/**
 * `social-ledger import`: the first pass stages and checks the whole file (any bad line refuses
 * it with BadLinesError, nothing written), the second applies it (docs/import.md). The same file
 * again resumes its run where it stopped, or, once done, changes nothing.
 */
export async function importFacts(
  pool: Pool,
  input: NodeJS.ReadableStream,
  options: StageOptions & ApplyOptions = {},
): Promise<ImportReport> {
  const staged = await stageImport(pool, input, options);
  const apply = new ImportApply(pool, await RelationService.open(pool), options);
  const applied = await apply.apply(staged.runId);
  return { runId: staged.runId, lines: staged.lines, existing: staged.existing, path: staged.path, applied };
}
