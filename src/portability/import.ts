import type { Pool } from "../db/pool.ts";
import { RelationService } from "../relations/relation-service.ts";
import { ImportApply, type Applied, type ApplyOptions } from "./import-apply.ts";
import { stageImport, type StageOptions, type StagedRun } from "./import-stage.ts";

/** One step of the import as this run took it: staging steps, the empty-ledger load's steps, then each apply phase. */
export interface PhaseTiming {
  step: string;
  ms: number;
  /** The lines the step went through (of its kind for an apply phase), where it walks lines. */
  lines?: number;
}

export interface ImportReport {
  runId: number;
  lines: number;
  /** none: staged now; resumed: a run of this file had been staged (and perhaps partly applied) before; done: imported before, nothing changed. */
  existing: StagedRun["existing"];
  /** empty-ledger: items and likes were bulk-loaded in the staging transaction (docs/import.md); resumable: all in batches. */
  path: StagedRun["path"];
  applied: Applied;
  /** Where this run's time went, in order. */
  phases: PhaseTiming[];
  webhooks: ImportWebhooks;
}

/**
 * What the run wrote that no webhook tells a receiver of (docs/webhooks.md, "Imports"): the
 * follows and likes written set-based have no outbox event (a history baseline stands for it).
 * Its accounts, blocks, and follows and likes written through the live functions sent their events.
 */
export interface ImportWebhooks {
  withoutEvents: { follows: number; likes: number };
}

export function importWebhooks(applied: Applied): ImportWebhooks {
  return { withoutEvents: { follows: applied.follows ?? 0, likes: applied.likes ?? 0 } };
}

/** A step's time and, where it walks lines, its rate: `  1.23 s  apply: follows  40000 lines, 32520 lines/s`. */
export function formatPhase(p: PhaseTiming): string {
  const head = `${(p.ms / 1000).toFixed(2).padStart(7)} s  ${p.step}`;
  if (p.lines === undefined) return head;
  return `${head.padEnd(72)} ${String(p.lines).padStart(9)} lines, ${String(Math.round((p.lines * 1000) / Math.max(p.ms, 1))).padStart(8)} lines/s`;
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
  const phases: PhaseTiming[] = [];
  const onTiming = (step: string, ms: number, lines?: number) => {
    phases.push(lines === undefined ? { step, ms } : { step, ms, lines });
    options.onTiming?.(step, ms, lines);
  };
  const staged = await stageImport(pool, input, { ...options, onTiming });
  const apply = new ImportApply(pool, await RelationService.open(pool), { ...options, onTiming });
  const applied = await apply.apply(staged.runId);
  return {
    runId: staged.runId,
    lines: staged.lines,
    existing: staged.existing,
    path: staged.path,
    applied,
    phases,
    webhooks: importWebhooks(applied),
  };
}
