/**
 * The `social-ledger` command line (commander). Parsing and the argument parsers are cheap;
 * each command's module (database, HTTP server, ...) is imported only when it runs, so
 * `--help` and bad arguments answer at once.
 *
 * Exit codes: 0 success; 1 failure (or `audit` found a violation); 2 bad arguments or
 * configuration, reported on stderr before anything is written.
 */
import { existsSync, readFileSync } from "node:fs";
import { Command, CommanderError, Option } from "commander";
import { ENVIRONMENT, MAX_TOKEN_TTL_S, RENAMED_VARIABLES, withRenamedVariables } from "../config.ts";
import { LedgerError } from "../errors.ts";
import {
  REBUILD_KINDS,
  UsageError,
  nonNegativeInteger,
  parseItems,
  parsePartitions,
  parseUserId,
  positiveInteger,
  type RebuildKind,
} from "./args.ts";

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** Library error codes that mean "the arguments or the configuration are wrong", not "it broke". */
const USAGE_CODES: ReadonlySet<string> = new Set([
  "INVALID_INPUT",
  "ITEM_NOT_FOUND",
  "POST_NOT_FOUND",
  "KEY_NOT_FOUND",
  "PARTITION_CONFIG",
  "TRANSPORT_CONFIG",
  "ACCOUNT_NOT_FOUND",
  "ACCOUNT_ERASED",
  "LEDGER_NOT_EMPTY",
]);

/** The variables' table of src/config.ts, one line each: name, default, meaning; the tuning knobs apart. */
export function environmentHelp(): string {
  const nameWidth = Math.max(...ENVIRONMENT.map((v) => v.name.length)) + 2;
  const defaultWidth = Math.max(...ENVIRONMENT.map((v) => v.shown.length)) + 2;
  const lines = (advanced: boolean) =>
    ENVIRONMENT.filter((v) => (v.advanced ?? false) === advanced)
      .map((v) => `  ${v.name.padEnd(nameWidth)}${v.shown.padEnd(defaultWidth)}${v.meaning}`)
      .join("\n");
  return `
Environment (name, default, meaning):
${lines(false)}

Advanced settings (tuning knobs: the defaults fit; durations in ms, rates per minute):
${lines(true)}

Errors: one line on stderr, "social-ledger <command>: <message>".
Exit codes: 0 success; 1 runtime failure (audit: a violation; reconcile: Redis failed);
2 bad input or usage (arguments, configuration, an item or post that does not exist).`;
}

/**
 * The package's version, from the nearest package.json above this file: src/cli/ runs from the
 * sources, a build's cli/ from dist/ (or the directory `npm run build -- --out-dir` named).
 */
function version(): string {
  for (let dir = new URL("./", import.meta.url); dir.pathname !== "/"; dir = new URL("../", dir)) {
    const file = new URL("package.json", dir);
    if (existsSync(file)) return (JSON.parse(readFileSync(file, "utf8")) as { version?: string }).version ?? "0.0.0";
  }
  return "0.0.0";
}

export function buildProgram(setExitCode: (code: number) => void): Command {
  const program = new Command("social-ledger");
  // Inherited by the subcommands defined below.
  program
    .exitOverride()
    .showHelpAfterError("(add --help for usage)")
    .description("Likes and follows as exact facts; counts and follower lists as derived views with a defined lag.")
    .version(version(), "-V, --version")
    .addHelpText("after", environmentHelp());

  program
    .command("serve")
    .description("Run the HTTP API (and, unless --no-workers, the consumers) until SIGINT/SIGTERM; same as `npm start`")
    .option(
      "--no-workers",
      "serve the API only; run the consumers as `social-ledger worker` processes (webhooks: `webhook-worker`)",
    )
    .option("--host <address>", "address to listen on (HOST)", process.env.HOST || "127.0.0.1")
    .addOption(
      new Option("--port <port>", "HTTP port (default: PORT or 8080)").argParser(positiveInteger("--port", 65535)),
    )
    .addOption(
      new Option(
        "--metrics-port <port>",
        "serve /metrics on this port instead of the API's (which then has none)",
      ).argParser(positiveInteger("--metrics-port", 65_535)),
    )
    .option("--metrics-host <address>", "interface of --metrics-port", "127.0.0.1")
    .addHelpText(
      "after",
      `
Opens the database (DATABASE_URL, or the embedded PostgreSQL 16 of LEDGER_DATA_DIR, started if
not running), applies migrations, listens, and on SIGINT/SIGTERM stops accepting, finishes in-flight
requests and the current consumer batches, and stops the embedded PostgreSQL it started.`,
    )
    .action(
      async (opts: { workers: boolean; host: string; port?: number; metricsPort?: number; metricsHost: string }) => {
        const { serve } = await import("./commands/serve.ts");
        setExitCode(await serve(opts));
      },
    );

  program
    .command("worker")
    .description(
      "Run the consumers (like counter, follower projector, comment counter, notifications) without HTTP until SIGINT/SIGTERM",
    )
    .addOption(
      new Option("--partitions <list>", "comma-separated partitions to serve, e.g. 0,1 (default: all)").argParser(
        parsePartitions,
      ),
    )
    .addOption(
      new Option("--batch-size <n>", "events per partition and pass")
        .argParser(positiveInteger("--batch-size", 100_000))
        .default(200),
    )
    .addOption(
      new Option("--metrics-port <port>", "serve /metrics (and /healthz) on this port").argParser(
        positiveInteger("--metrics-port", 65_535),
      ),
    )
    .option("--host <host>", "interface of --metrics-port", "127.0.0.1")
    .addOption(
      new Option(
        "--transport <name>",
        "polling: read the outbox; nats: pull from JetStream (NATS_URL; run `relay` too)",
      )
        .choices(["polling", "nats"])
        .default("polling"),
    )
    .addHelpText(
      "after",
      `
Any number of workers may run at once, on the same or on different partitions: every event is
applied exactly once. Logs like serve, one JSON line per batch on stdout ({"msg":"batch",
"consumer":...,"applied":n,...}); with --metrics-port, /metrics has serve's consumer metrics. SIGINT/SIGTERM lets the current batch commit, then exits 0. Start \`serve\`
first (or use DATABASE_URL): a worker that starts the embedded cluster itself stops it on exit.`,
    )
    .action(
      async (opts: {
        partitions?: number[];
        batchSize: number;
        metricsPort?: number;
        host: string;
        transport: string;
      }) => {
        const { worker } = await import("./commands/worker.ts");
        setExitCode(await worker(opts));
      },
    );

  program
    .command("webhook-worker")
    .description("Deliver signed webhooks from the outboxes without HTTP API or consumers until SIGINT/SIGTERM")
    .addOption(
      new Option("--loops <n>", "delivery loops (default: LEDGER_WEBHOOK_LOOPS)").argParser(
        positiveInteger("--loops", 64),
      ),
    )
    .addOption(
      new Option("--metrics-port <port>", "serve /metrics (and /healthz) on this port").argParser(
        positiveInteger("--metrics-port", 65_535),
      ),
    )
    .option("--host <host>", "interface of --metrics-port", "127.0.0.1")
    .addHelpText(
      "after",
      `
Each (endpoint, outbox, partition) is delivered in order by the one process holding its cursor's
row lock; the cursor moves only after the receiver's 2xx, so a crash re-sends (same webhook-id),
never skips. Any number may run beside serve. docs/webhooks.md.`,
    )
    .action(async (opts: { loops?: number; metricsPort?: number; host: string }) => {
      const { webhookWorker } = await import("./commands/webhook-worker.ts");
      setExitCode(await webhookWorker(opts));
    });

  program
    .command("relay")
    .description("Publish the outboxes (likes, relations, comments, posts) to NATS JetStream until SIGINT/SIGTERM")
    .addOption(new Option("--transport <name>", "the broker").choices(["nats"]).makeOptionMandatory())
    .addOption(
      new Option("--batch-size <n>", "events per partition and pass")
        .argParser(positiveInteger("--batch-size", 100_000))
        .default(500),
    )
    .addOption(
      new Option("--metrics-port <port>", "serve /metrics (and /healthz) on this port").argParser(
        positiveInteger("--metrics-port", 65_535),
      ),
    )
    .option("--host <host>", "interface of --metrics-port", "127.0.0.1")
    .addHelpText(
      "after",
      `
Publishes each partition's outbox in sequence order to <stream>.<kind>.<part> with Nats-Msg-Id
kind:part:seq, and records its progress in relay_watermark after JetStream acknowledged the batch:
a crash re-publishes (JetStream's duplicate window drops the copies), never skips. Any number may run;
one leads, the others stand by. Consume with \`worker --transport nats\`. docs/transport-jetstream.md.`,
    )
    .action(async (opts: { transport: string; batchSize: number; metricsPort?: number; host: string }) => {
      const { relay } = await import("./commands/relay.ts");
      setExitCode(await relay(opts));
    });

  program
    .command("migrate")
    .description("Apply pending migrations and print the migration status as JSON")
    .option("--status", "print the status only, applying nothing (exit 1 when migrations are pending)")
    .addHelpText(
      "after",
      `
Safe while the service runs and from several processes at once (each migration runs exactly once).
Prints {"latest","applied","pending","appliedNow":[...],"migrations":[{id,name,checksum,appliedAt}],...}.
Refuses (exit 1, nothing written) a database whose applied migrations differ from this code's files:
one edited, renamed, renumbered or reverted after it was applied, or one this code does not know.`,
    )
    .action(async (opts: { status?: boolean }) => {
      const { migrateCommand } = await import("./commands/migrate.ts");
      setExitCode(await migrateCommand(opts));
    });

  program
    .command("rebuild")
    .description(
      "Rebuild like (or comment) counts, the notifications or the home timelines from the facts and report the drift it corrected",
    )
    .addOption(
      new Option(
        "--kind <kind>",
        "which view: likes (per item), comments (per post), notifications (per recipient) or feed (per reader)",
      )
        .choices(REBUILD_KINDS)
        .default("likes"),
    )
    .addOption(
      new Option(
        "--items <list>",
        "comma-separated item ids, post ids with --kind comments, recipients with --kind notifications, readers with --kind feed (default: all)",
      ).argParser(parseItems),
    )
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      `
Safe under live traffic and running consumers. Shows a progress bar when stdout is a terminal,
then the drift report: items checked, each drifted item old -> new with its drift, total |drift|.`,
    )
    .action(async (opts: { kind: RebuildKind; items?: string[]; json?: boolean }) => {
      const { rebuild } = await import("./commands/rebuild.ts");
      setExitCode(await rebuild(opts));
    });

  program
    .command("prune")
    .description("Delete the dedup keys at or below the watermarks and the outbox events below the retention boundary")
    .addOption(
      new Option(
        "--keep-last <n>",
        "keep the newest n events of every partition (default: LEDGER_RETENTION_KEEP_EVENTS or 10000)",
      ).argParser(nonNegativeInteger("--keep-last", 1_000_000_000)),
    )
    .addOption(
      new Option(
        "--keep-seconds <s>",
        "keep events younger than s seconds (default: LEDGER_RETENTION_KEEP_MS or 86400)",
      ).argParser(nonNegativeInteger("--keep-seconds", 31_536_000)),
    )
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      `
Safe under live traffic and running consumers (docs/retention.md): the dedup keys
(processed_event, proj_seen, comment_processed) go at or below each watermark; the outbox events
(like_outbox, relation_event, comment_outbox) at or below min(watermark, retention_hold rows,
the Redis count layer's cursor and last reconciliation when REDIS_URL is set, the margin), and
the audits keep counting them through a pruned-prefix baseline. A kind whose rebuild is running,
or whose Redis cannot be read, keeps its outbox this time (exit code 0).`,
    )
    .action(async (opts: { json?: boolean; keepLast?: number; keepSeconds?: number }) => {
      const { prune } = await import("./commands/prune.ts");
      setExitCode(await prune(opts));
    });

  program
    .command("erase")
    .description("Erase an account: every fact through the outboxes, in bounded batches, in the foreground to the end")
    .argument("<accountId>", "the account to erase", parseUserId)
    .addOption(
      new Option(
        "--batch-size <n>",
        "facts per batch, each one short transaction (default: LEDGER_ERASURE_BATCH_SIZE or 500)",
      ).argParser(positiveInteger("--batch-size", 10_000)),
    )
    .option("--json", "print the final status as JSON")
    .addHelpText(
      "after",
      `
Safe under live traffic (docs/erasure.md): the account reads as missing at once and every write by
or towards it is refused until the end; posts and comments become tombstones, every like of it and
of its posts and comments, its follows and requests both ways and its blocks are turned off through
the outboxes, so every count drops exactly. Resumable: after a crash, run it again (or let serve's
background job continue). An account erased already is reported as such (exit 0); an unknown id
is exit 2.`,
    )
    .action(async (accountId: string, opts: { batchSize?: number; json?: boolean }) => {
      const { erase } = await import("./commands/erase.ts");
      setExitCode(await erase(accountId, opts));
    });

  program
    .command("reconcile")
    .description("Reconcile the Redis counters (REDIS_URL) with the facts once and report the drift it repaired")
    .option("--json", "print the reports as JSON")
    .addHelpText(
      "after",
      `
Visits only the counters whose targets changed since the last run; safe under live traffic
(increments racing with it are kept). Drift is recorded in count_drift_history.
Exit 1 when Redis does not answer within 5 s, or when a kind or a counter failed
(a failed counter is dropped and backfilled from the facts at its next read).`,
    )
    .action(async (opts: { json?: boolean }) => {
      const { reconcileCommand } = await import("./commands/reconcile.ts");
      setExitCode(await reconcileCommand(opts));
    });

  program
    .command("audit")
    .description("Run the write-side and read-side invariant checks; exit code 1 on any violation")
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      `
The same checks as GET /v1/admin/audit: likes write side and read side, relation invariants and,
once the follower projection has caught up, the projection against the truth.`,
    )
    .action(async (opts: { json?: boolean }) => {
      const { audit } = await import("./commands/audit.ts");
      setExitCode(await audit(opts));
    });

  program
    .command("import")
    .description("Import existing facts (accounts, items, likes, follows, blocks) from an NDJSON file, one fact a line")
    .argument("<file>", "the file, or - for standard input")
    .addOption(
      new Option(
        "--batch-size <n>",
        "the most staged lines per apply transaction (each is sized to take about a second)",
      )
        .argParser(positiveInteger("--batch-size", 1_000_000))
        .default(20_000),
    )
    .option("--json", "print the report as JSON")
    .option(
      "--empty-ledger",
      "require the empty-ledger path (items and likes bulk-loaded in one transaction); refused, exit 2, when the ledger has items or likes",
    )
    .addHelpText(
      "after",
      `
Lines: {"kind":"account","id":..,"private":bool,"hideCollections":bool} {"kind":"item","id":..}
{"kind":"like","user":..,"item":..,"at":ISO-8601} {"kind":"follow","follower":..,"followee":..,
"state":"ACTIVE"|"PENDING","at":..} {"kind":"block","blocker":..,"blocked":..,"at":..} (at optional:
the import's time). The whole file is checked first: any bad line is reported by number (the first 20),
exit 2, and nothing is imported. Then it is applied in batches under live traffic, with the rules of the
live writes. The same file again changes nothing; after a crash the same command finishes it. With
REDIS_URL, the touched Redis counters are dropped (backfilled from the facts). On a ledger without items
or likes, those are loaded in the checking transaction instead, with like_fact's indexes built after
(it locks the like tables until it commits: run it before the service serves likes). docs/import.md.`,
    )
    .action(async (file: string, opts: { batchSize: number; json?: boolean; emptyLedger?: boolean }) => {
      const { importCommand } = await import("./commands/import.ts");
      setExitCode(await importCommand(file, opts));
    });

  program
    .command("export")
    .description("Write every fact (or one account's) to stdout in the import's NDJSON format")
    .option(
      "--account <id>",
      "only this account's facts: itself, its likes, follows and blocks (and the items and accounts they name)",
    )
    .addHelpText(
      "after",
      `
Streamed page by page: accounts, items, blocks, follows, likes. Importing the output into an empty
database gives the same facts and counts. Posts and comments are not exported (nor importable) yet.`,
    )
    .action(async (opts: { account?: string }) => {
      const { exportCommand } = await import("./commands/export.ts");
      setExitCode(await exportCommand(opts));
    });

  program
    .command("token")
    .description(
      "Mint a development token (HS256) for a user; prints only the token (refused, exit 2, when LEDGER_JWKS_URL is set)",
    )
    .argument("<userId>", "the acting user (the token's sub)", parseUserId)
    .option("--admin", "add role=admin (admin routes, setup for other users)")
    .addOption(
      new Option("--ttl <seconds>", "lifetime in seconds (every token expires)")
        .argParser(positiveInteger("--ttl", MAX_TOKEN_TTL_S))
        .default(30 * 24 * 3600, "2592000, 30 days"),
    )
    .option(
      "--create-secret",
      "create the data directory's secret when there is none yet (to mint before serve first starts there)",
    )
    .addHelpText(
      "after",
      `
Signs with LEDGER_JWT_SECRET, or with the secret serve keeps in its data directory (LEDGER_DATA_DIR,
./data), which is what serve verifies with, and says on stderr which one it used. Without that file
(run elsewhere than the service's data directory) it is refused, exit 2, unless --create-secret.
Example:
  curl -H "Authorization: Bearer $(social-ledger token alice)" http://127.0.0.1:8080/v1/items/x/likes/me`,
    )
    .action(async (userId: string, opts: { admin?: boolean; ttl: number; createSecret?: boolean }) => {
      const { token } = await import("./commands/token.ts");
      setExitCode(await token(userId, opts));
    });

  // commander's own messages ("error: unknown option ...") in the CLI's one form.
  for (const command of [program, ...program.commands]) {
    command.configureOutput({
      outputError: (message, write) =>
        write(`${errorPrefix(command === program ? undefined : command.name())}${message.replace(/^error: /, "")}`),
    });
  }
  return program;
}

/** "social-ledger <command>: ", the start of every error line of the CLI. */
export function errorPrefix(command: string | undefined): string {
  return command ? `social-ledger ${command}: ` : "social-ledger: ";
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Parses and runs one command line; resolves with the exit code (serve and worker exit by themselves). */
export async function runCli(argv: readonly string[]): Promise<number> {
  // Every command reads process.env, so the renamed variables are carried over once, here.
  const renamed = withRenamedVariables(process.env);
  for (const warning of renamed.warnings) process.stderr.write(`social-ledger: warning: ${warning}\n`);
  for (const { old, name } of RENAMED_VARIABLES) {
    delete process.env[old];
    if (renamed.env[name] !== undefined) process.env[name] = renamed.env[name];
  }
  let code = EXIT_OK;
  let running: string | undefined;
  const program = buildProgram((c) => (code = c));
  program.hook("preAction", (_program, action) => {
    running = action.name();
  });
  try {
    await program.parseAsync(argv as string[]);
    return code;
  } catch (err) {
    // commander has already printed its message (or the help) by the time it throws.
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    if (err instanceof UsageError || (err instanceof LedgerError && USAGE_CODES.has(err.code))) {
      process.stderr.write(`${errorPrefix(running)}${describe(err)}\n`);
      return EXIT_USAGE;
    }
    process.stderr.write(`${errorPrefix(running)}${describe(err)}\n`);
    if (process.env.DEBUG) process.stderr.write(`${err instanceof Error ? err.stack : ""}\n`);
    return EXIT_FAILURE;
  }
}
