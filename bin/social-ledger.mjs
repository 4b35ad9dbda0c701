#!/usr/bin/env node
// The `social-ledger` command. The service runs from its TypeScript sources through tsx (a
// runtime dependency), so this launcher only registers tsx's ESM loader and hands over to
// src/cli/index.ts, which parses the arguments and sets the exit code.
import { register } from "tsx/esm/api";

register();
await import("../src/cli/index.ts");
