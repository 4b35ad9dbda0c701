import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { chromium, type BrowserContext } from "playwright-core";

/** Debian's Chromium (`apt-get install chromium`, which .ci/run does): playwright never downloads a browser here. */
export const CHROMIUM = "/usr/bin/chromium";

const FLAGS = [
  "--no-sandbox", // CI runs as root, where Chromium's sandbox refuses to start
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/**
 * Headless Chromium with a fresh profile. Throws with what to do when the browser is missing or
 * cannot start: a browser test that cannot run fails, it never skips.
 */
export async function launchChromium(viewport: { width: number; height: number }): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `the browser tests need Chromium at ${CHROMIUM}, which is missing: install it with 'apt-get update && apt-get install -y chromium' (.ci/run does)`,
    );
  }
  const profile = await mkdtemp(path.join(os.tmpdir(), "ledger-chromium-"));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: FLAGS,
      viewport,
      timeout: 30_000,
    });
  } catch (err) {
    await rm(profile, { recursive: true, force: true });
    throw new Error(`Chromium at ${CHROMIUM} did not start: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }
  let closed: Promise<void> | undefined;
  return {
    context,
    close() {
      closed ??= (async () => {
        await context.close();
        await rm(profile, { recursive: true, force: true });
      })();
      return closed;
    },
  };
}
