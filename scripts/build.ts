/**
 * `npm run build`: compiles src/ to JavaScript in dist/ (tsconfig.build.json; the sources'
 * `./x.ts` imports become `./x.js`) and copies every other file under src/ that the service reads
 * at run time (the migrations' SQL, the dashboard's page), so `node dist/server.js` runs without
 * TypeScript or tsx. The output directory is emptied first: a file deleted from src/ (a migration
 * above all) must not survive in the build. `build.json` is written last: bin/social-ledger.mjs
 * runs the build only when it is there and no source is newer than the build's start.
 * `--out-dir DIR` builds elsewhere (inside the repository, so node_modules is found).
 */
import { spawn } from "node:child_process";
import { cp, mkdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SOURCES = path.join(ROOT, "src");

/** Written last into the output directory; what bin/social-ledger.mjs reads. */
const BUILD_STAMP = "build.json";

function outDirFromArgs(args: string[]): string {
  const at = args.indexOf("--out-dir");
  const dir = path.resolve(ROOT, at >= 0 ? (args[at + 1] ?? "") : "dist");
  // It is emptied: never the repository, its sources, or anything outside it.
  const relative = path.relative(ROOT, dir);
  if (
    relative === "" ||
    relative.startsWith("..") ||
    path.isAbsolute(relative) ||
    ["src", "test", "scripts", "bench", "bin", "node_modules", "docs", "deploy"].includes(relative.split(path.sep)[0]!)
  ) {
    throw new Error(`--out-dir must be a new directory inside ${ROOT} (dist, .tmp/...), not ${dir}`);
  }
  return dir;
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, stdio: "inherit" });
    child.on("error", reject);
    child.on("exit", (code, signal) =>
      code === 0
        ? resolve()
        : reject(new Error(`${path.basename(args[0] ?? command)} failed (${signal ?? `exit code ${code}`})`)),
    );
  });
}

const outDir = outDirFromArgs(process.argv.slice(2));
const startedAt = Date.now();
await rm(outDir, { recursive: true, force: true });
await mkdir(outDir, { recursive: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
await run(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", outDir]);
await cp(SOURCES, outDir, { recursive: true, filter: (source) => !source.endsWith(".ts") });
await writeFile(
  path.join(outDir, BUILD_STAMP),
  `${JSON.stringify({ sourcesAsOfMs: startedAt, builtAt: new Date().toISOString() })}\n`,
);
process.stderr.write(
  `built ${path.relative(ROOT, outDir)}/ in ${((Date.now() - startedAt) / 1000).toFixed(1)} s; start it with: npm run start:prod (node ${path.relative(ROOT, outDir)}/server.js)\n`,
);
