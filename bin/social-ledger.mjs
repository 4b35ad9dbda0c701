#!/usr/bin/env node
// The `social-ledger` command. It runs the compiled build (`npm run build`, dist/) when there is
// one and no file under src/ is newer than the build's start (or no src/ at all: an image that
// holds only the build); otherwise the TypeScript sources through tsx (a runtime dependency), so an
// edit is never hidden behind an old build. Either way cli/index parses the arguments and sets the
// exit code.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { URL, fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** Whether dist/ holds a complete build (scripts/build.ts writes build.json last) of the sources as they are. */
function buildIsCurrent() {
  const stampFile = path.join(ROOT, "dist", "build.json");
  if (!existsSync(stampFile)) return false;
  const stamp = JSON.parse(readFileSync(stampFile, "utf8"));
  const sources = path.join(ROOT, "src");
  if (!existsSync(sources)) return true;
  // Directories too: their time changes when a file is added, renamed or removed.
  const paths = [sources, ...readdirSync(sources, { recursive: true }).map((p) => path.join(sources, p))];
  return paths.every((p) => statSync(p).mtimeMs < stamp.sourcesAsOfMs);
}

if (buildIsCurrent()) {
  await import("../dist/cli/index.js");
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/cli/index.ts");
}
