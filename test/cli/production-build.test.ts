/**
 * The production entry point: `npm run build` (the real npm script, into a directory of its own
 * under .tmp/ so the checkout's dist/ is never touched) compiles the service to JavaScript that
 * plain node runs. The compiled server (`npm run start:prod`'s command on that directory) starts
 * as a real child process with no loader on its command line or in its environment, on an
 * embedded PostgreSQL in a new LEDGER_DATA_DIR, answers /healthz, /readyz and a like (tokens from
 * the compiled CLI), logs its start-up time, and on SIGTERM exits 0 with its PostgreSQL gone.
 * Node 20 cannot load a `.ts` module without a loader, so a server that answers under such a
 * command line ran JavaScript only. bin/social-ledger.mjs runs a build only while it is current;
 * `npm start` (the sources through tsx) logs its start-up time as well.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, readFile, readdir, rm, utimes, writeFile } from "node:fs/promises";
import path from "node:path";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { LineChild, withDeadline, type Exit } from "../support/line-child.ts";
import { createTestDatabase } from "../support/test-db.ts";
import {
  httpClient,
  npmScript,
  pollUntil,
  postmasterPid,
  processAlive,
  REPO_ROOT,
  userEnv,
  type CliResult,
} from "./cli-child.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
/** A stand-in for a checkout: bin/ (a copy of the real launcher), dist/ (the build), src/ (a copy of the sources). */
let root: string;
let dist: string;
let buildMs: number;

/** Runs `node ...args` to its end (bounded). */
async function runNode(args: string[], env: NodeJS.ProcessEnv, ms = 300_000): Promise<CliResult> {
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exit = await withDeadline(
    new Promise<Exit>((resolve) => child.on("close", (code, signal) => resolve({ code, signal }))),
    ms,
    () => `node ${args.join(" ")}\nstdout:\n${stdout}\nstderr:\n${stderr}`,
  );
  return { ...exit, stdout, stderr };
}

/** What in a process's command line and environment would make node load TypeScript. */
async function loaders(pid: number): Promise<string[]> {
  const argv = (await readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0");
  const environ = (await readFile(`/proc/${pid}/environ`, "utf8")).split("\0");
  return [
    ...argv.filter((a) => /^--(import|loader|experimental-loader|require)\b|^-r$|tsx|typescript|\.ts$/.test(a)),
    ...environ.filter((v) => v.startsWith("NODE_OPTIONS=")),
  ];
}

async function filesUnder(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)));
}

before(async () => {
  await mkdir(path.join(REPO_ROOT, ".tmp"), { recursive: true });
  root = path.join(REPO_ROOT, ".tmp", `production-build-${process.pid}`);
  dist = path.join(root, "dist");
  const started = Date.now();
  const built = await runNode(
    [npmScript("npm"), "run", "build", "--", "--out-dir", path.relative(REPO_ROOT, dist)],
    userEnv({}),
  );
  buildMs = Date.now() - started;
  assert.equal(built.code, 0, `npm run build:\n${built.stdout}\n${built.stderr}`);
});

after(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

test("npm run build: JavaScript only, every relative import rewritten to .js, no TypeScript or tsx imported, every runtime file of src/ copied", async (t) => {
  t.diagnostic(`note npm run build took ${buildMs} ms`);
  const built = await filesUnder(dist);
  const sources = await filesUnder(path.join(REPO_ROOT, "src"));
  assert.deepEqual(
    built.filter((f) => f.endsWith(".ts")),
    [],
  );
  for (const source of sources) {
    const expected = source.endsWith(".ts") ? source.replace(/\.ts$/, ".js") : source;
    assert.ok(built.includes(expected), `${expected} is in the build`);
  }
  assert.ok(
    built.some((f) => /^db\/migrations\/\d{3}_.*\.sql$/.test(f)),
    "the migrations' SQL",
  );
  assert.ok(built.includes(path.join("api", "dashboard", "public", "index.html")), "the dashboard's page");
  for (const file of built.filter((f) => f.endsWith(".js"))) {
    const code = await readFile(path.join(dist, file), "utf8");
    assert.doesNotMatch(
      code,
      /(?:from\s*|import\s*\(\s*)["'](?:\.{1,2}\/[^"']*\.ts|tsx(?:\/[^"']*)?|typescript)["']/,
      `${file} imports TypeScript or tsx`,
    );
  }
  const stamp = JSON.parse(await readFile(path.join(dist, "build.json"), "utf8")) as { sourcesAsOfMs: number };
  assert.ok(stamp.sourcesAsOfMs <= Date.now());
});

test(
  "the compiled server under plain node: no loader, /healthz, /readyz and a like answer, start-up time logged, SIGTERM stops it and its PostgreSQL with exit 0",
  { timeout: 300_000 },
  async (t) => {
    const pkg = JSON.parse(await readFile(path.join(REPO_ROOT, "package.json"), "utf8")) as {
      scripts: Record<string, string>;
    };
    // What start:prod runs, on this test's build directory instead of dist/.
    assert.equal(pkg.scripts["start:prod"], "exec node dist/server.js");
    const dataDir = await clusterTempDir("ledger-production-");
    const port = await freePort();
    const env = userEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: "info" });
    assert.equal(env.NODE_OPTIONS, undefined);
    const server = new LineChild("node dist/server.js", [path.join(dist, "server.js")], { cwd: REPO_ROOT, env });
    t.after(async () => {
      if (server.alive()) await server.stop("SIGKILL");
      await rm(dataDir, { recursive: true, force: true });
    });
    const address = LISTENING.exec(await server.waitFor(LISTENING, 180_000))![1]!;
    const postmaster = postmasterPid(path.join(dataDir, "pg"));
    assert.ok(postmaster !== undefined && processAlive(postmaster), "the embedded PostgreSQL runs");
    t.after(() => {
      if (processAlive(postmaster)) process.kill(postmaster, "SIGKILL");
    });

    assert.deepEqual(
      await loaders(server.pid),
      [],
      "nothing on the server's command line or in its environment loads TypeScript",
    );
    // The check sees a loader where there is one: this test file runs under `--import tsx`.
    assert.notDeepEqual(await loaders(process.pid), []);

    // The log (stdout) and the banner (stderr) are two pipes: the log line may come second.
    const started = JSON.parse(await server.waitFor(/"startupMs":/, 10_000)) as {
      msg: string;
      startupMs: number;
      compiled: boolean;
    };
    assert.equal(started.compiled, true);
    assert.match(started.msg, /^started in \d+ ms from process start \(compiled JavaScript\)$/);
    assert.match(server.errorLines.join("\n"), /^ {2}started: {3}in \d+\.\d s, compiled JavaScript/m);
    t.diagnostic(
      `note the compiled server listened ${started.startupMs} ms after its process started (initdb of a new data directory included)`,
    );

    const http = httpClient(address);
    assert.equal((await http("GET", "/healthz")).status, 200);
    assert.equal((await http("GET", "/readyz")).status, 200);
    const cli = (...args: string[]) => runNode([path.join(dist, "cli", "index.js"), ...args], env, 60_000);
    const [admin, alice] = await Promise.all([cli("token", "root", "--admin"), cli("token", "alice")]);
    assert.equal(admin.code, 0, admin.stderr);
    assert.equal(alice.code, 0, alice.stderr);
    assert.equal((await http("PUT", "/v1/items/x", admin.stdout.trim())).status, 200);
    const liked = await http("PUT", "/v1/items/x/likes/me", alice.stdout.trim());
    assert.equal(liked.status, 200, JSON.stringify(liked.body));
    assert.equal(liked.body.liked, true);
    await pollUntil(
      "the compiled consumer counted the like",
      async () =>
        (
          await http<{ count: number; stale: boolean }>(
            "GET",
            "/v1/items/x/like-count?allowedLag=0",
            alice.stdout.trim(),
          )
        ).body,
      (c) => c.stale === false && c.count === 1,
      30_000,
    );

    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
    assert.equal(processAlive(postmaster), false, "the embedded PostgreSQL stopped with the server");
    assert.equal(postmasterPid(path.join(dataDir, "pg")), undefined, "a clean shutdown removed postmaster.pid");
    const log = server.lines.map((l) => JSON.parse(l) as { msg: string });
    assert.equal(log.at(-1)?.msg, "stopped");
  },
);

test(
  "bin/social-ledger.mjs runs the build while it is current, and the TypeScript sources once a source is newer or the build is incomplete; without src/, the build",
  { timeout: 120_000 },
  async () => {
    await mkdir(path.join(root, "bin"));
    await cp(path.join(REPO_ROOT, "bin", "social-ledger.mjs"), path.join(root, "bin", "social-ledger.mjs"));
    const sources = path.join(root, "src");
    await cp(path.join(REPO_ROOT, "src"), sources, { recursive: true });
    // The build is taken as made from the copy as it is now: every file and directory of it is older.
    const builtFrom = Date.now() + 1000;
    await writeFile(path.join(dist, "build.json"), JSON.stringify({ sourcesAsOfMs: builtFrom }));
    const before = new Date(builtFrom - 60_000);
    const later = new Date(builtFrom + 60_000);
    // Which code answered: the build finds this package.json first (its own version), the sources the repository's.
    await writeFile(path.join(dist, "package.json"), JSON.stringify({ type: "module", version: "0.0.0-the-build" }));
    const { version } = JSON.parse(await readFile(path.join(REPO_ROOT, "package.json"), "utf8")) as { version: string };
    const bin = async () => {
      const result = await runNode([path.join(root, "bin", "social-ledger.mjs"), "--version"], userEnv({}), 60_000);
      assert.equal(result.code, 0, result.stderr);
      return result.stdout.trim();
    };

    assert.equal(await bin(), "0.0.0-the-build", "a current build runs");
    const edited = path.join(sources, "likes", "like-service.ts");
    assert.ok(existsSync(edited));
    await utimes(edited, later, later);
    assert.equal(await bin(), version, "a source edited after the build: the sources run");
    await utimes(edited, before, before);
    assert.equal(await bin(), "0.0.0-the-build");
    await writeFile(path.join(sources, "likes", "added.ts"), "export {};\n");
    await utimes(path.join(sources, "likes", "added.ts"), before, before);
    // The directory's mtime is the add's; set it past the stamp, since the add may come within the
    // stamp's second of slack on a fast run (CI once ran this whole test in 1.3 s).
    await utimes(path.join(sources, "likes"), later, later);
    assert.equal(await bin(), version, "a source added after the build (its directory changed): the sources run");
    await rm(path.join(sources, "likes", "added.ts"));
    await utimes(path.join(sources, "likes"), before, before);
    assert.equal(await bin(), "0.0.0-the-build");
    await rm(path.join(dist, "build.json"));
    assert.equal(await bin(), version, "a build without its stamp (unfinished, or under way): the sources run");
    await writeFile(path.join(dist, "build.json"), JSON.stringify({ sourcesAsOfMs: builtFrom }));
    await rm(sources, { recursive: true });
    assert.equal(await bin(), "0.0.0-the-build", "no src/ (an image that holds only the build): the build runs");
  },
);

test(
  "npm start (the sources through tsx) logs its start-up time too, as not compiled",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2 });
    t.after(() => db.close());
    const server = new LineChild("npm start", [npmScript("npm"), "start"], {
      cwd: REPO_ROOT,
      env: userEnv({ DATABASE_URL: db.url, PORT: String(await freePort()), LOG_LEVEL: "info" }),
    });
    t.after(async () => {
      if (server.alive()) await server.stop("SIGKILL");
    });
    const started = JSON.parse(await server.waitFor(/"startupMs":/, 90_000)) as {
      msg: string;
      startupMs: number;
      compiled: boolean;
    };
    assert.equal(started.compiled, false);
    assert.match(started.msg, /^started in \d+ ms from process start \(TypeScript sources through tsx\)$/);
    t.diagnostic(
      `note npm start listened ${started.startupMs} ms after its node process started (DATABASE_URL, migrated)`,
    );
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
  },
);
