/**
 * `npm start` (these sources through tsx) and `npm run start:prod` (the build, dist/server.js): the
 * service on its defaults, exactly `social-ledger serve`. With DATABASE_URL it
 * uses that PostgreSQL; otherwise an embedded PostgreSQL 16 whose data lives in LEDGER_DATA_DIR
 * (./data) and survives restarts. HTTP on PORT (8080), consumers in the same process. A start
 * that fails says why in one line on stderr and exits non-zero.
 */
process.argv.splice(2, process.argv.length, "serve", ...process.argv.slice(2));
await import("./cli/index.ts");
